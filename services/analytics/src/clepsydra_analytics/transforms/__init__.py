"""The jobs' logic: pure DataFrame -> DataFrame functions over the export schema (schemas.py).
No I/O, no session building, no clock: "now" comes in as an argument."""
