"""The model: the decoder, its attention and kernels, the position schemes, sparse
patterns and attention temperature. What a forward pass computes belongs here; nothing here
reads files, parses flags or writes results."""
