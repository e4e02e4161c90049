"""Codes: each a fixed linear encoder and a decoder per straggler set, behind one interface.

Layout, one module per thing it holds:

- base: the `Code` interface (encoder E, cached decoders D_F, array kinds, validation) and the default hooks of
  robust decoding (no locator; decode the rest; 2A + 2 results).
- robust: robust decoding's code-agnostic half: the entry point behind `Code.robust_decode` and the search over
  leave-one-out residuals; it imports no code class, each code brings its locator through the hooks.
- gcc (GCC, with its robust hooks), gcc_low_redundancy (GCC's "select" decoder for K < N <= 1.5 K),
  smoother_loo (the RKHS smoother's closed-form leave-one-out residuals and rank-|S| downdates, used by both).
- berrut (`berrut_weights`, BACC and its robust hooks), approxifer (ApproxIFER's locator, BACC's baseline).
- lagrange (LCC, and Berlekamp-Welch error correction as its robust hook), replication, parm (ParM),
  systematic (SystematicGCC, `calibrate_rho`).
- private: T-privacy for LCC, BACC and GCC (`colluders`: Gaussian masks interpolated with the inputs, fresh per
  call), the mixin those three codes share.
- capabilities: `Capabilities`, what a code declares it can do (missing inputs, coding groups, uncertainty,
  its decodability rule), read by runtime and serving instead of probing.
- registry: codes by name (`CODES`, `make_code`, `parse_option`).
"""

from .base import Code
from .berrut import BACC, berrut_weights
from .capabilities import Capabilities
from .gcc import GCC
from .lagrange import LCC
from .parm import ParM
from .registry import CODES, make_code, parse_option
from .replication import Replication
from .systematic import SystematicGCC, calibrate_rho

__all__ = ["BACC", "CODES", "GCC", "LCC", "Capabilities", "Code", "ParM", "Replication", "SystematicGCC",
           "berrut_weights", "calibrate_rho", "make_code", "parse_option"]
