"""Scheduling: the hand-over of due level entries and timers (D3-D10, T1-T2), timers' cancel
and reschedule, and the carry-forward of pending schedule records before retention (P4). Built
on the write path and everything below it."""
