"""The indexes a record is dispatched into after its append: ConsumeQueues, the key index, the
timer index, schedule entries' states, held pulls; and the dispatcher that feeds them (live
appends, recovery, carry-forward). Built on the log only."""
