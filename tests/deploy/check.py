"""`make deploy-check`: the deploy/ files checked offline (issue 17).

* every kustomization (deploy/k8s/base, each overlay, deploy/spark) renders with
  ``kubectl kustomize``;
* every rendered object, the Spark pod templates and the SparkApplications validate against the
  Kubernetes schemas bundled by ``kubernetes-validate`` (strict: unknown fields fail). The two
  custom resources (ServiceMonitor, SparkApplication) have no bundled schema: they are checked
  for their API group, kind and required top-level fields here, and said so;
* ``hadolint`` passes on deploy/Dockerfile with no finding;
* ``checkov`` finds 0 failed checks in deploy/k8s (kustomize) and deploy/spark (kustomize and
  its plain manifests); a check that does not apply is skipped in the manifest itself, with its
  reason, never here.

Runs in the deploy tools' own virtualenv (``.venv-deploy``, made by the Makefile), apart from
the project's: ``.venv-deploy/bin/python tests/deploy/check.py``. Exit 0 when all pass.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).parents[2]
BIN = Path(sys.executable).parent
KUSTOMIZATIONS = ("deploy/k8s/base", "deploy/k8s/overlays/dev", "deploy/k8s/overlays/production",
                  "deploy/spark")  # fmt: skip
CUSTOM = {  # kind: (API group, required top-level keys of spec)
    "ServiceMonitor": ("monitoring.coreos.com", ("endpoints", "selector")),
    "SparkApplication": ("sparkoperator.k8s.io", ("type", "mode", "mainApplicationFile")),
}


def run(what: str, command: list[str]) -> tuple[bool, str]:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    output = (done.stdout + done.stderr).strip()
    print(f"== {what}: {'ok' if done.returncode == 0 else f'FAILED ({done.returncode})'}")
    if done.returncode != 0 or (output and len(output) < 2000):
        print("   " + output.replace("\n", "\n   ")[:4000])
    return done.returncode == 0, output


def custom_resources(documents: list[dict[str, Any]]) -> list[str]:
    problems = []
    for doc in documents:
        kind = doc.get("kind", "")
        if kind not in CUSTOM:
            continue
        group, required = CUSTOM[kind]
        name = doc.get("metadata", {}).get("name")
        if not str(doc.get("apiVersion", "")).startswith(group + "/"):
            problems.append(f"{kind} {name}: apiVersion {doc.get('apiVersion')} not in {group}")
        missing = [k for k in required if k not in doc.get("spec", {})]
        if missing or not name:
            problems.append(f"{kind} {name}: missing {missing or 'metadata.name'}")
    return problems


def main() -> int:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("kubectl is not installed (it renders the kustomizations): apt-get install kubectl")
        return 2
    results: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="deploy-check-") as tmp:
        out = Path(tmp)
        for folder in KUSTOMIZATIONS:
            ok, text = run(f"kubectl kustomize {folder}", [kubectl, "kustomize", folder])
            results.append(ok)
            if ok:
                (out / (folder.replace("/", "_") + ".yaml")).write_text(text + "\n")
        for extra in sorted((ROOT / "deploy/spark").glob("*.yaml")):
            if extra.name != "kustomization.yaml":
                shutil.copy(extra, out / f"spark-file_{extra.name}")
        documents = [
            doc
            for path in sorted(out.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text())
            if isinstance(doc, dict)
        ]
        print(f"   {len(documents)} objects rendered: " + json.dumps(
            sorted({d.get("kind", "?") for d in documents})))  # fmt: skip
        plain = out / "plain"
        plain.mkdir()
        for i, doc in enumerate(d for d in documents if d.get("kind") not in CUSTOM):
            (plain / f"{i:03d}.yaml").write_text(yaml.safe_dump(doc))
        files = sorted(str(p) for p in plain.glob("*.yaml"))
        ok, _ = run("kubernetes-validate --strict", [str(BIN / "kubernetes-validate"),
                                                    "--strict", "--quiet", *files])  # fmt: skip
        results.append(ok)
        problems = custom_resources(documents)
        print(f"== custom resources ({', '.join(CUSTOM)}; no bundled schema): "
              + ("ok" if not problems else "FAILED\n   " + "\n   ".join(problems)))  # fmt: skip
        results.append(not problems)
        ok, _ = run("hadolint deploy/Dockerfile", [str(BIN / "hadolint"), "deploy/Dockerfile"])
        results.append(ok)
        checkov = [str(BIN / "checkov"), "--compact", "--quiet", "--skip-download"]
        for folder, framework in (("deploy/k8s", "kustomize"), ("deploy/spark", "kustomize"),
                                  ("deploy/spark", "kubernetes")):  # fmt: skip
            ok, _ = run(f"checkov {folder} ({framework})",
                        [*checkov, "-d", folder, "--framework", framework])  # fmt: skip
            results.append(ok)
    print("deploy-check: " + ("all passed" if all(results) else "FAILED"))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
