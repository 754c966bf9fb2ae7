"""A run: its preparation (config to sharded parameters), the train loop, checkpoints,
metrics, the device mesh and the data pipeline. What happens between a config and a trained
checkpoint belongs here."""
