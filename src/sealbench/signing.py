"""Ed25519 signatures over a bundle's SHA256SUMS, checkable without sealbench.

Keys are PEM files: the private key PKCS#8 without a passphrase (mode 0600), the public key
SubjectPublicKeyInfo. A signature is the raw 64-byte Ed25519 signature of the exact bytes it
covers, so a stranger can check a bundle with stock OpenSSL 3::

    openssl pkeyutl -verify -pubin -inkey KEY.pub -rawin -in SHA256SUMS -sigfile SHA256SUMS.sig

:func:`sign` and :func:`signature_valid` are pure (bytes in, bytes or a verdict out);
:func:`keygen` and :func:`read_key` are the only functions here that touch files.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .digest import sha256_bytes
from .errors import UsageError

SIGNATURE_BYTES = 64


def keygen(out_prefix: Path) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair as ``OUT_PREFIX.key`` (0600) and ``OUT_PREFIX.pub``.

    Returns the private and public key paths.

    Raises:
        UsageError: either file exists already (nothing is overwritten) or cannot be written.
    """
    private_path = out_prefix.with_name(out_prefix.name + ".key")
    public_path = out_prefix.with_name(out_prefix.name + ".pub")
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise UsageError(f"{path} exists; choose another prefix (keys are never overwritten)")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        _write_new(private_path, private_pem, 0o600)
        _write_new(public_path, public_pem, 0o644)
    except OSError as e:
        private_path.unlink(missing_ok=True)
        raise UsageError(f"cannot write the key pair at {out_prefix}: {e.strerror or e}") from None
    return private_path, public_path


def _write_new(path: Path, data: bytes, mode: int) -> None:
    # O_EXCL: a key file that appeared since the check above is never overwritten.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_key(path: Path) -> bytes:
    """The bytes of a key file.

    Raises:
        UsageError: the file cannot be read.
    """
    try:
        return path.read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: cannot read the key ({e.strerror or e})") from None


def _private_key(pem: bytes, source: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise UsageError(f"{source}: not an unencrypted PEM private key (make one with `sealbench keygen`)") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"{source}: not an Ed25519 private key")
    return key


def _public_key(pem: bytes, source: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError):
        raise UsageError(f"{source}: not a PEM public key (make one with `sealbench keygen`)") from None
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(f"{source}: not an Ed25519 public key")
    return key


def check_private_key(private_pem: bytes, source: str = "signing key") -> None:
    """Refuse early a private key :func:`sign` could not use.

    Raises:
        UsageError: not an unencrypted PEM Ed25519 private key.
    """
    _private_key(private_pem, source)


def sign(private_pem: bytes, data: bytes, source: str = "signing key") -> bytes:
    """The raw 64-byte Ed25519 signature of ``data``.

    Raises:
        UsageError: ``private_pem`` is not an unencrypted PEM Ed25519 private key.
    """
    return _private_key(private_pem, source).sign(data)


def signature_valid(public_pem: bytes, data: bytes, signature: bytes, source: str = "public key") -> bool:
    """Whether ``signature`` is ``public_pem``'s Ed25519 signature of exactly ``data``.

    Raises:
        UsageError: ``public_pem`` is not a PEM Ed25519 public key.
    """
    key = _public_key(public_pem, source)
    if len(signature) != SIGNATURE_BYTES:
        return False
    try:
        key.verify(signature, data)
    except InvalidSignature:
        return False
    return True


def fingerprint(public_pem: bytes, source: str = "public key") -> str:
    """The tagged sha256 of the raw 32-byte public key: a short name for a key in reports.

    Raises:
        UsageError: ``public_pem`` is not a PEM Ed25519 public key.
    """
    raw = _public_key(public_pem, source).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return sha256_bytes(raw)
