r"""Data matrices: everything the flow of M = W W^T needs from a data set (docs/theory.md section 2).

- ``protocol``: what every implementation provides (:class:`AbstractDataMatrices`, and
  :class:`AbstractSampleDataMatrices` for sample data: minibatches, per-sample losses);
- ``samples``: :class:`DataMatrices`, the structured A(x_n) of every sample, and the losses;
- ``chunked``: the same, rebuilt chunk by chunk for data too large to hold;
- ``moments``: second moments of the data (squared loss), and their numpy twin for the
  engine that compiles nothing;
- ``population``: the closed form for Gaussian inputs and a linear teacher;
- ``checks``: the checks of files and sample arrays;
- ``build``: :func:`data_matrices` and :func:`flow_data`, which build them from (X, Y) by
  the route that costs least.
"""

from __future__ import annotations

from nqf.core.lazy import lazy_submodules
from nqf.theory.data_matrices.build import LOSSES as LOSSES
from nqf.theory.data_matrices.build import MAX_ABS_ENTRY as MAX_ABS_ENTRY
from nqf.theory.data_matrices.build import AbstractDataMatrices as AbstractDataMatrices
from nqf.theory.data_matrices.build import AbstractSampleDataMatrices as AbstractSampleDataMatrices
from nqf.theory.data_matrices.build import DataMatrices as DataMatrices
from nqf.theory.data_matrices.build import PopulationDataMatrices as PopulationDataMatrices
from nqf.theory.data_matrices.build import check_sample_arrays as check_sample_arrays
from nqf.theory.data_matrices.build import checked_samples as checked_samples
from nqf.theory.data_matrices.build import data_matrices as data_matrices
from nqf.theory.data_matrices.build import describe_file as describe_file
from nqf.theory.data_matrices.build import flow_data as flow_data
from nqf.theory.data_matrices.build import population_data_matrices as population_data_matrices
from nqf.theory.data_matrices.build import read_npz as read_npz

__getattr__ = lazy_submodules(__name__)  # chunked and moments on first use
