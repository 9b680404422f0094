"""What keeps the store healthy in the background: the maintenance worker (attachment workers and
the one sweeper, supervised) and the invariant audit."""
