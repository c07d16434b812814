"""One module per FAULTS.md row: the fault's record and its faulty twin, side by side."""
