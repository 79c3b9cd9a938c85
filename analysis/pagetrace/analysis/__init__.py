"""The analysis layer, on pandas and numpy: the trace as a DataFrame
(`trace_frame`), requests and seeks (`metrics`), seek-cost models (`model`),
union and diff (`merge`), read against used (`waste`), figures (`plots`),
reports (`report`, `compare`, `startup_table`), exports (`export`), the other
tools' outputs (`formats`) and synthetic traces (`synth`)."""
