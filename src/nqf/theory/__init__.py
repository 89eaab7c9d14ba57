"""Stage 2, the theory: from A(x) and the data to predicted training.

- data matrices (``data_matrices``, with ``sample_matrices``, ``sample_checks``, ``population``;
  ``moments``, ``chunked``): the statistics of A(x) over the data;
- maps and flows on M = W W^T (``flow``, gathering ``flow_base``, ``flow_maps``, ``flow_continuous``,
  ``flow_stability``; ``jumps``, ``lv_maps``);
- modes: the shared eigenbasis (``modes``), the Lotka-Volterra system (``lotka_volterra``,
  ``lv_solve``, ``lv_logistic``) and its singular limit m0 -> 0 (``singular_limit``);
- power laws over many modes (``scaling``);
- ``predict``: all of the above for one configuration (``prediction``: its config and result;
  ``predict_init``, ``predict_stages``: its stages), and ``departure``, the network-corrected
  prediction (``departure_path``, ``departure_plateaus``, ``corrections``).

Imports only ``core`` and ``architectures`` (the stage below)."""
