"""The DuckDB catalog, the Parquet files, the SQL views over them, and the schemas of what is stored."""
