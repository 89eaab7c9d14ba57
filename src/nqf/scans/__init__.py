"""Many runs at once: ``reproduce`` runs the paper's experiment suite into a results store and
builds the report."""
