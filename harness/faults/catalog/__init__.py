"""One module per row of docs/FAULTS.md: the fault's record and its faulty twin, side by side."""
