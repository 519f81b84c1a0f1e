"""The run's files: checkpoints, metrics and samples logs, the data order, interrupts, seeds
and the export of a trained team; and the watch that warns when a run is not learning."""
