"""The fleet on this host: the computer service and its state machine, the reconciler, events."""
