"""Typed specs (pydantic v2, frozen, unknown keys forbidden). No computation lives here."""

from clustertwin.specs.base import Sourced, Spec
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.facility import FacilitySpec
from clustertwin.specs.hardware import (
    PRECISIONS,
    CPUSpec,
    FabricSpec,
    GPUSpec,
    SSDSpec,
    StorageSpec,
    SwitchSpec,
)
from clustertwin.specs.loading import build, load, read_document
from clustertwin.specs.model import ModelSpec, MoESpec
from clustertwin.specs.network import NetworkSpec
from clustertwin.specs.node import NICSpec, NodeSpec, ScaleUpSpec
from clustertwin.specs.parallelism import ParallelismSpec

__all__ = [
    "PRECISIONS",
    "CPUSpec",
    "Calibration",
    "ClusterSpec",
    "FabricSpec",
    "FacilitySpec",
    "GPUSpec",
    "MoESpec",
    "ModelSpec",
    "NICSpec",
    "NetworkSpec",
    "NodeSpec",
    "ParallelismSpec",
    "SSDSpec",
    "ScaleUpSpec",
    "Sourced",
    "Spec",
    "StorageSpec",
    "SwitchSpec",
    "build",
    "load",
    "read_document",
]
