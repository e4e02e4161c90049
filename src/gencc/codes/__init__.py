"""Codes: each a fixed linear encoder and a decoder per straggler set, behind one interface."""

from .base import Code
from .berrut import BACC, berrut_weights
from .gcc import GCC
from .lagrange import LCC
from .parm import ParM
from .registry import CODES, make_code, parse_option
from .replication import Replication
from .systematic import SystematicGCC, calibrate_rho

__all__ = ["BACC", "CODES", "GCC", "LCC", "Code", "ParM", "Replication", "SystematicGCC", "berrut_weights",
           "calibrate_rho", "make_code", "parse_option"]
