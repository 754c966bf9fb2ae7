"""A run: its preparation (config to sharded parameters), the train loop, checkpoints,
metrics and the device mesh; the data pipeline it reads is lcx.data, below it. What happens
between a config and a trained checkpoint belongs here."""
