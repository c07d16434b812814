"""Pool and allocator suites: random mutation sequences against a model of ownership, on any target."""
