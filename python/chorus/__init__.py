"""chorus: collectives, codecs and model averaging for data-parallel training.

    import chorus
    comm = chorus.init()                   # under chorus-run, mpirun or srun
    comm.allreduce(x)                      # any DLPack array, in place
    comm.allreduce(grads, "avg", codec=chorus.ErrorFeedback("int8"))

PyTorch: ``import chorus.torch`` registers the torch.distributed backend
"chorus" (torchrun, DDP) and brings the DDP communication hooks; the
averaging schemes are in ``chorus.averaging``; one-sided tensor windows
are ``chorus.Window``.
"""

from __future__ import annotations

from . import _ucx

if _ucx.FROM_WHEEL:  # PyPI's UCX: its libraries are found by name once loaded (their RPATH is the build machine's)
    import libucx

    libucx.load_library()

from . import averaging, cuda, errors, heterogeneity, nccl, record
from ._chorus import Codec, ErrorFeedback, PowerSGD, Topology, allreduce_error_bound
from .communicator import Communicator, Op, Request, connect, init, join
from .errors import Error, InvalidArgument, Mismatch, PeerFailure, TimeoutError, TransportError, Unavailable
from .window import Window

__version__ = "0.1.0"

__all__ = [
    "Codec", "Communicator", "Error", "ErrorFeedback", "InvalidArgument", "Mismatch", "Op", "PeerFailure", "PowerSGD",
    "Request", "TimeoutError", "Topology", "TransportError", "Unavailable", "allreduce_error_bound", "averaging", "cuda",
    "nccl",
    "Window", "connect", "errors", "heterogeneity", "init", "join", "record",
]
