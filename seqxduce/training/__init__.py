"""Training: a run assembled from its parts, the loop over its steps, and what it saves."""
