"""Floor 0: what every stage shares: errors, floating-point precision, the compilation cache,
stored traced programs, minibatch sampling and reading switch steps off a loss curve.

Nothing here imports another nqf package."""
