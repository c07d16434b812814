"""swa-harness: regression harness for hybrid sliding-window-attention KV caches and graph runners."""
