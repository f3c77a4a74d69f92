"""Grammars of the names ``deploy`` writes into generated files, checked where the input enters
(:class:`~clustertwin.deploy.job.DeploySpec`), so a script or manifest never holds a value its consumer
refuses. Each checker returns the value or raises ``ValueError`` with a one-line reason; the CLI reports
it as exit 2 naming the option (``--rdma-resource: ...``).

- **Kubernetes qualified names** (label keys, extended resource names), after ``IsQualifiedName`` in
  k8s.io/apimachinery ``pkg/util/validation`` and the Kubernetes docs ("Labels and Selectors", "Extended
  resources"): ``[prefix/]name``, the name at most 63 characters matching
  ``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?``, the prefix a DNS-1123 subdomain of at most 253 characters
  (lower-case labels ``[a-z0-9]([-a-z0-9]*[a-z0-9])?`` joined by dots). An **extended resource name**
  (``IsExtendedResourceName`` in Kubernetes ``pkg/apis/core/helper``) must have the prefix, must not be in
  the ``kubernetes.io/`` namespace, must not start with ``requests.``, and ``requests.<name>`` (its quota
  name) must be a qualified name too, which leaves the prefix 244 characters.
- **Image references**, the grammar of distribution/reference (``reference.go``, ``regexp.go``)::

      reference        := name [ ":" tag ] [ "@" digest ]
      name             := [domain "/"] path-component ["/" path-component]*     (at most 255 characters)
      domain           := host [":" port-number]
      host             := domain-component ["." domain-component]* | "[" IPv6address "]"
      domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
      path-component   := /[a-z0-9]+/ [separator /[a-z0-9]+/]*,  separator := /[_.]|__|[-]+/
      tag              := /[\\w][\\w.-]{0,127}/
      digest           := algorithm ":" /[0-9a-fA-F]{32,}/,  algorithm := /[A-Za-z][A-Za-z0-9]*/ joined by [-_+.]

  pyxis (``srun --container-image``, NVIDIA/pyxis wiki "Usage") also takes an enroot URI
  ``[USER@][REGISTRY#]IMAGE[:TAG]`` or the path of a squashfs file (starting with ``/`` or ``.``).
- **Linux interface names**, ``dev_valid_name`` in the kernel's ``net/core/dev.c``: 1 to 15 bytes
  (``IFNAMSIZ`` = 16 with the NUL), not ``.`` or ``..``, no ``/``, ``:`` or whitespace; here also printable
  ASCII only (udev and systemd never name an interface otherwise) and no ``,`` (NCCL's list separator).
- **NCCL interface and HCA lists** (NCCL environment documentation; ``parseStringList`` and
  ``matchIfList`` in NCCL's source): ``["^"]["="]entry(","entry)*``: ``^`` excludes the listed prefixes,
  ``=`` matches names exactly. ``NCCL_SOCKET_IFNAME`` entries are interface names (or prefixes);
  ``NCCL_IB_HCA`` entries are verbs device names (``mlx5_0``, ``mlx5_bond_0``, ``irdma0``) with an
  optional ``:port`` (1-255, the verbs port number is a uint8_t). NCCL copies each entry into a 64-byte
  buffer (``struct netIf``'s ``prefix[64]``) without a bound, so device names stay within 63 bytes; lists
  hold at most :data:`MAX_LIST_ENTRIES` entries.
"""

from __future__ import annotations

import re
from collections.abc import Callable

K8S_NAME_MAX = 63
"""Longest name part of a qualified name (``qualifiedNameMaxLength``)."""
K8S_SUBDOMAIN_MAX = 253
"""Longest DNS-1123 subdomain (``DNS1123SubdomainMaxLength``)."""
QUOTA_PREFIX = "requests."
"""Kubernetes' quota prefix of an extended resource (``DefaultResourceRequestsPrefix``)."""
IMAGE_NAME_MAX = 255
"""Longest image name, domain and path (distribution/reference ``NameTotalLengthMax``)."""
IMAGE_REFERENCE_MAX = 1024
"""Longest reference looked at (name 255 + tag 129 + a SHA-512 digest 136, rounded up): longer input is
refused before any pattern runs."""
PATH_MAX = 4095
"""Longest path of a squashfs file (Linux ``PATH_MAX`` = 4096 with the NUL)."""
IFNAMSIZ = 16
"""Linux interface name buffer, NUL included."""
HCA_NAME_MAX = 63
"""Longest verbs device name NCCL can hold (its ``netIf.prefix[64]``; the kernel's IB_DEVICE_NAME_MAX is 64)."""
MAX_LIST_ENTRIES = 32
"""Most entries of an NCCL interface or HCA list (more than any host's NICs)."""
SHOWN = 40
"""Characters of a refused value quoted in the error."""

_QNAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_REMOTE = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?P<name>(?:{_DOMAIN}/)?{_REMOTE})(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)
_ENROOT = re.compile(rf"(?:[A-Za-z0-9._-]+@)?(?:(?P<registry>{_DOMAIN})#)?(?P<name>{_REMOTE})(?::{_TAG})?"
                     rf"(?:@{_DIGEST})?", re.ASCII)
_SQUASHFS_PATH = re.compile(r"\.{0,2}/[A-Za-z0-9_.+/-]*")
_IFNAME_BAD = re.compile(r"[^!-~]|[/:,]")
_HCA = re.compile(rf"(?P<dev>[A-Za-z0-9][A-Za-z0-9_.-]{{0,{HCA_NAME_MAX - 1}}})(?::(?P<port>[1-9][0-9]{{0,2}}))?")


def shown(value: str) -> str:
    """``repr`` of ``value``, cut to :data:`SHOWN` characters with its length when longer."""
    if len(value) <= SHOWN:
        return repr(value)
    return f"{value[:SHOWN]!r}... ({len(value):,} characters)"


def qualified_name(value: str, *, prefix_required: bool = False, prefix_max: int = K8S_SUBDOMAIN_MAX) -> str:
    """``value`` if it is a Kubernetes qualified name ``[prefix/]name`` (module docstring)."""
    prefix, slash, name = value.rpartition("/")
    if len(value) > prefix_max + 1 + K8S_NAME_MAX:
        raise ValueError(f"{shown(value)} is longer than a qualified name ({prefix_max} + 1 + {K8S_NAME_MAX})")
    if prefix_required and not slash:
        raise ValueError(f"{shown(value)} needs a domain prefix (prefix/name, e.g. rdma/hca_shared_devices_a)")
    if len(name) > K8S_NAME_MAX or not _QNAME.fullmatch(name):
        raise ValueError(f"{shown(value)}: the name part must be 1-{K8S_NAME_MAX} characters "
                         "[A-Za-z0-9], '-', '_', '.', starting and ending alphanumeric")
    if slash and (len(prefix) > prefix_max or not _SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"{shown(value)}: the prefix must be a DNS subdomain of at most {prefix_max} "
                         "characters (lower-case letters, digits, '-', dots between labels)")
    return value


def label_key(value: str) -> str:
    """``value`` if it is a Kubernetes label key (a qualified name, prefix optional)."""
    return qualified_name(value)


def extended_resource(value: str) -> str:
    """``value`` if it is a Kubernetes extended resource name (``IsExtendedResourceName``)."""
    if value.startswith(QUOTA_PREFIX) or "kubernetes.io/" in value:
        raise ValueError(f"{shown(value)}: extended resources are outside the kubernetes.io domain and do "
                         f"not start with '{QUOTA_PREFIX}'")
    return qualified_name(value, prefix_required=True, prefix_max=K8S_SUBDOMAIN_MAX - len(QUOTA_PREFIX))


def image_reference(value: str) -> str:
    """``value`` if it is an image reference of the distribution/reference grammar (module docstring)."""
    m = _REFERENCE.fullmatch(value) if len(value) <= IMAGE_REFERENCE_MAX else None
    if m is None:
        raise ValueError(f"{shown(value)} is not an image reference ([registry[:port]/]path[:tag][@digest], "
                         "path in lower case)")
    if len(m.group("name")) > IMAGE_NAME_MAX:
        raise ValueError(f"{shown(value)}: the image name is longer than {IMAGE_NAME_MAX} characters")
    return value


def pyxis_image(value: str) -> str:
    """``value`` if pyxis takes it: an image reference, an enroot URI ``[USER@][REGISTRY#]IMAGE[:TAG]`` or
    the path of a squashfs file (starting with ``/`` or ``.``)."""
    if value.startswith(("/", ".")):
        if len(value) > PATH_MAX or not _SQUASHFS_PATH.fullmatch(value):
            raise ValueError(f"{shown(value)}: a squashfs path uses letters, digits and '_.+/-' "
                             f"(at most {PATH_MAX} bytes)")
        return value
    m = _ENROOT.fullmatch(value) if len(value) <= IMAGE_REFERENCE_MAX else None
    if m is not None and len(m.group("name")) + len(m.group("registry") or "") < IMAGE_NAME_MAX:
        return value
    try:
        return image_reference(value)
    except ValueError as e:
        raise ValueError(f"{e}; or an enroot URI [USER@][REGISTRY#]IMAGE[:TAG], or a squashfs path") from None


def interface_name(name: str) -> str:
    """``name`` if it is a Linux interface name (``dev_valid_name``) NCCL can list (module docstring)."""
    if not name or len(name.encode()) >= IFNAMSIZ or name in (".", "..") or _IFNAME_BAD.search(name):
        raise ValueError(f"{shown(name)} is not a Linux interface name (1-{IFNAMSIZ - 1} bytes of printable "
                         "ASCII, no '/', ':', ',' or whitespace, not '.' or '..')")
    return name


def hca_name(entry: str) -> str:
    """``entry`` if it is a verbs device name with an optional ``:port`` (``mlx5_0``, ``mlx5_0:1``)."""
    m = _HCA.fullmatch(entry)
    if m is None or (m.group("port") is not None and int(m.group("port")) > 255):
        raise ValueError(f"{shown(entry)} is not an HCA name (a verbs device such as mlx5_0: letters, digits, "
                         f"'_.-', at most {HCA_NAME_MAX} characters, with an optional :port of 1-255)")
    return entry


def _nccl_list(value: str, entry: Callable[[str], str], what: str) -> str:
    body = value[1:] if value.startswith("^") else value
    body = body[1:] if body.startswith("=") else body
    items = body.split(",")
    if len(items) > MAX_LIST_ENTRIES:
        raise ValueError(f"{shown(value)} lists {len(items):,} {what}s; at most {MAX_LIST_ENTRIES}")
    for item in items:
        if not item:
            raise ValueError(f"{shown(value)}: empty entry (expected [^][=]{what}[,{what}...])")
        entry(item)
    return value


def socket_ifname(value: str) -> str:
    """``value`` if it is an NCCL_SOCKET_IFNAME list: ``[^][=]name[,name...]`` of interface names."""
    return _nccl_list(value, interface_name, "interface")


def ib_hca(value: str) -> str:
    """``value`` if it is an NCCL_IB_HCA list: ``[^][=]device[:port][,device[:port]...]``."""
    return _nccl_list(value, hca_name, "HCA")
