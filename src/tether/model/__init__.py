"""The model: pure values and functions (codec, events, fold, statuses, durations, clock,
input checks); no I/O, nothing imported from above."""
