"""Running the pipeline: the parameters file, papermill execution, the run lock, listing runs."""
