"""What a training job reads per sample: :class:`DatasetSpec` and the named presets in :data:`DATASETS`.

A sample is what one row of a global batch needs from storage: a tokenized sequence (``seq_len x
token_bytes``), one compressed image, one 3D volume. The read pattern says how files map to samples:
``sequential`` = large shards streamed in order (Megatron ``.bin``, TFRecord, WebDataset tar), one file open
per ``file_bytes``; ``random`` = one file or object per sample, opened at random (an ImageNet JPEG
folder, MLPerf unet3d ``.npz``). Host CPU work per sample (decode, augmentation, collation) is
``decode_core_s`` core-seconds.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.specs.base import NonNegFloat, PositiveFloat, Spec

ReadPattern = Literal["sequential", "random"]
DEFAULT_SHARD_BYTES = 1e9
"""Shard size assumed for sequential datasets that do not give ``file_bytes`` (1 GB: WebDataset and
Megatron shards are typically 0.1-10 GB)."""


class DatasetSpec(Spec):
    """Per-sample bytes, file layout, host CPU cost and local-cache hit rate of a training dataset."""

    name: str = "custom"
    """Label."""
    sample_bytes: PositiveFloat | None = None
    """Bytes read from storage per sample (compressed, as stored). Tokenized text may give
    ``token_bytes`` instead: ``sample_bytes = seq_len x token_bytes``."""
    token_bytes: PositiveFloat | None = None
    """Bytes per stored token (Megatron indexed datasets: 2 B for vocabularies < 65,500, else 4 B)."""
    read_pattern: ReadPattern = "sequential"
    """sequential (large shards streamed) or random (one file/object per sample)."""
    file_bytes: PositiveFloat | None = None
    """Bytes per file: sequential defaults to 1 GB shards, random to one sample per file."""
    decode_core_s: NonNegFloat = 0.0
    """Host CPU core-seconds per sample for decode, augmentation and collation."""
    cache_hit_rate: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    """Fraction of sample bytes served from node-local NVMe / page cache instead of shared storage."""
    prefetch: bool = True
    """Data-loader workers prefetch the next step while the GPUs compute (PyTorch DataLoader
    ``prefetch_factor``, DALI pipelines); False: loading and compute alternate."""
    source: str | None = None
    """Where the figures come from."""

    @model_validator(mode="after")
    def _size_given(self) -> DatasetSpec:
        if self.sample_bytes is None and self.token_bytes is None:
            raise ValueError("dataset needs sample_bytes (bytes per sample) or token_bytes (tokenized text)")
        return self

    def bytes_per_sample(self, seq_len: int | None = None) -> float:
        """``sample_bytes``, or ``seq_len x token_bytes`` for tokenized text."""
        if self.sample_bytes is not None:
            return float(self.sample_bytes)
        if seq_len is None:
            raise SpecError(f"dataset '{self.name}' gives token_bytes: a sequence length is needed")
        assert self.token_bytes is not None
        return float(seq_len) * float(self.token_bytes)

    def files_per_sample(self, seq_len: int | None = None) -> float:
        """File opens per sample: ``sample_bytes / file_bytes`` (random default: 1 file per sample;
        sequential default: 1 GB shards)."""
        b = self.bytes_per_sample(seq_len)
        if self.file_bytes is not None:
            return b / float(self.file_bytes)
        return 1.0 if self.read_pattern == "random" else b / DEFAULT_SHARD_BYTES

    def request_bytes(self, seq_len: int | None = None) -> float:
        """Bytes per read request: random reads fetch one sample (at most one file), sequential reads
        stream in requests of up to :data:`MAX_REQUEST_BYTES`."""
        b = self.bytes_per_sample(seq_len)
        if self.read_pattern == "random":
            return min(b, float(self.file_bytes or b), MAX_REQUEST_BYTES)
        return MAX_REQUEST_BYTES


MAX_REQUEST_BYTES = 2.0**20
"""Largest read request (1 MiB: Lustre's default RPC size ``max_pages_per_rpc=1M``, NFS rsize 1 MiB)."""

DATASETS: dict[str, DatasetSpec] = {
    "tokenized-text": DatasetSpec(
        name="tokenized-text", token_bytes=4, read_pattern="sequential", file_bytes=1e9, decode_core_s=2e-6,
        source="Megatron-LM indexed dataset (.bin/.idx): int32 tokens for vocabularies >= 65,500 "
               "(DType.optimal_dtype), memory-mapped shards; collation cost ~2 µs per sample (estimate)"),
    "imagenet-jpeg": DatasetSpec(
        name="imagenet-jpeg", sample_bytes=110e3, read_pattern="random", decode_core_s=4e-3,
        source="ImageNet-1k train: 1.28 M JPEGs, ~140 GB (mean ~110 KB per file); JPEG decode + "
               "RandomResizedCrop + flip on the CPU ~250 images/s per core (PIL-SIMD class; estimate)"),
    "imagenet-dali": DatasetSpec(
        name="imagenet-dali", sample_bytes=110e3, read_pattern="random", decode_core_s=3e-4,
        source="As imagenet-jpeg with decode and augmentation on the GPU (NVIDIA DALI nvJPEG); the host "
               "keeps file reading and batching (~0.3 ms per image per core; estimate)"),
    "webdataset-images": DatasetSpec(
        name="webdataset-images", sample_bytes=110e3, read_pattern="sequential", file_bytes=1e9,
        decode_core_s=4e-3,
        source="ImageNet-class JPEGs packed in 1 GB WebDataset tar shards (sequential reads), CPU decode "
               "as imagenet-jpeg"),
    "video-4k-raw": DatasetSpec(
        name="video-4k-raw", sample_bytes=3840 * 2160 * 3, read_pattern="sequential", file_bytes=1e9,
        decode_core_s=1e-3,
        source="Uncompressed 4K RGB frames (3840 x 2160 x 3 B = 24.9 MB): the DGX SuperPOD 'Best' "
               "storage level's workload class; copy/normalise ~1 ms per frame per core (estimate)"),
}


def dataset(ref: str | DatasetSpec | dict) -> DatasetSpec:
    """A dataset preset by name, an inline mapping, or a spec; unknown names suggest the nearest."""
    if isinstance(ref, DatasetSpec):
        return ref
    if isinstance(ref, dict):
        from clustertwin.specs.loading import build

        return build(DatasetSpec, ref)
    if ref not in DATASETS:
        raise SpecError(f"unknown dataset '{ref}'{did_you_mean(ref, DATASETS)} "
                        f"(known: {', '.join(DATASETS)})")
    return DATASETS[ref]
