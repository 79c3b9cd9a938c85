"""Out of core, on Parquet and DuckDB (docs/scale.md): the dataset of runs
(`dataset`), the analysis verbs over it (`outofcore`) and the consensus of
many runs (`consensus`)."""
