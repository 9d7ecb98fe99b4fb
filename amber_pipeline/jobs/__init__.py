"""Jobs: the request, the lifecycle (quoted, running, ended), Quotes, and the cell run with its Trials."""
