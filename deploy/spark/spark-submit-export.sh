#!/usr/bin/env bash
# `tiered-gateway export` with spark-submit straight to Kubernetes (no spark-operator): the
# same settings as sparkapplication-export.yaml. Run it where `spark-submit` is on PATH (e.g.
# `pip install 'tiered-gateway[spark]'`, which brings pyspark and its spark-submit) with a
# kubeconfig or token that may create pods in the namespace. Once per namespace first:
#   kubectl apply -k deploy/spark      # ServiceAccount/RBAC + ConfigMap tiered-gateway-spark
#   kubectl create secret generic tiered-gateway-s3 -n tiered-gateway \
#     --from-literal=AWS_ACCESS_KEY_ID=... --from-literal=AWS_SECRET_ACCESS_KEY=...
# Then:
#   KUBERNETES_API=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}' \
#     | sed 's|^https://||') STORE=s3://bucket TOPIC=orders OUTPUT=s3a://lake/orders \
#     deploy/spark/spark-submit-export.sh [more export flags, e.g. --key-pair k1=/etc/...]
# For scrub, replace the application arguments at the end with: scrub --store ... --json
set -euo pipefail

: "${KUBERNETES_API:?set KUBERNETES_API to the API server host:port}"
: "${STORE:?set STORE to the bucket, e.g. s3://kafka-tiered}"
: "${TOPIC:?set TOPIC to the topic to export}"
: "${OUTPUT:?set OUTPUT to the output folder, e.g. s3a://lake/orders}"
NAMESPACE="${NAMESPACE:-tiered-gateway}"
IMAGE="${IMAGE:-tiered-gateway-spark:0.1.0}"
KEY_PREFIX="${KEY_PREFIX:-tiered/}"
EXECUTORS="${EXECUTORS:-2}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
secret=tiered-gateway-s3

exec spark-submit \
  --master "k8s://https://${KUBERNETES_API}" \
  --deploy-mode cluster \
  --name tiered-gateway-export \
  --conf "spark.kubernetes.namespace=${NAMESPACE}" \
  --conf "spark.kubernetes.container.image=${IMAGE}" \
  --conf spark.kubernetes.container.image.pullPolicy=IfNotPresent \
  --conf spark.kubernetes.authenticate.driver.serviceAccountName=tiered-gateway-spark \
  --conf "spark.kubernetes.driver.podTemplateFile=${here}/pod-template-driver.yaml" \
  --conf "spark.kubernetes.executor.podTemplateFile=${here}/pod-template-executor.yaml" \
  --conf "spark.kubernetes.driver.secretKeyRef.AWS_ACCESS_KEY_ID=${secret}:AWS_ACCESS_KEY_ID" \
  --conf "spark.kubernetes.driver.secretKeyRef.AWS_SECRET_ACCESS_KEY=${secret}:AWS_SECRET_ACCESS_KEY" \
  --conf "spark.kubernetes.executor.secretKeyRef.AWS_ACCESS_KEY_ID=${secret}:AWS_ACCESS_KEY_ID" \
  --conf "spark.kubernetes.executor.secretKeyRef.AWS_SECRET_ACCESS_KEY=${secret}:AWS_SECRET_ACCESS_KEY" \
  --conf spark.pyspark.python=/opt/tiered-gateway/bin/python \
  --conf spark.pyspark.driver.python=/opt/tiered-gateway/bin/python \
  --conf spark.ui.showConsoleProgress=false \
  --conf spark.driver.cores=1 \
  --conf spark.driver.memory=2g \
  --conf spark.kubernetes.driver.limit.cores=1 \
  --conf "spark.executor.instances=${EXECUTORS}" \
  --conf spark.executor.cores=2 \
  --conf spark.executor.memory=4g \
  --conf spark.kubernetes.executor.limit.cores=2 \
  local:///opt/tiered-gateway-spark/driver.py \
  export \
  --store "${STORE}" \
  --key-prefix "${KEY_PREFIX}" \
  --topic "${TOPIC}" \
  --output "${OUTPUT}" \
  --format parquet \
  --mode overwrite \
  --quiet \
  "$@"
