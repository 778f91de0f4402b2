"""One module per sampling algorithm, each with the interface of :mod:`core.interface.sampler`."""
