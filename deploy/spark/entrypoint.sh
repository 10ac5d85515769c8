#!/bin/bash
# Container entrypoint of tiered-gateway-spark pods started by Spark on Kubernetes.
#
# Spark's Kubernetes backend starts the driver and executor containers with the arguments
# `driver --properties-file ... --class ... <app> <args>` and `executor` (the rest in SPARK_*
# environment variables), and expects the image's entrypoint to understand them, as Spark's
# own images do. The image's entrypoint is `tiered-gateway` (the layout contract), so the pod
# templates run this script instead: mounted from the ConfigMap `tiered-gateway-spark` at
# /opt/tiered-gateway-spark. Spark comes from the pyspark wheel in /opt/tiered-gateway, Java 17
# from the image (openjdk-17-jre-headless). Any other first argument runs `tiered-gateway`.
set -euo pipefail

venv=/opt/tiered-gateway
if [[ -z "${SPARK_HOME:-}" ]]; then
  SPARK_HOME="$("$venv/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
fi
export SPARK_HOME
# The driver and the executors' Python workers import `gateway` from the same virtualenv.
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$venv/bin/python}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$venv/bin/python}"

classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:${SPARK_HOME}/jars/*"
if [[ -n "${SPARK_EXTRA_CLASSPATH:-}" ]]; then
  classpath="$classpath:$SPARK_EXTRA_CLASSPATH"
fi

case "${1:-}" in
  driver)
    shift
    # Spark already chose cluster mode; inside the driver pod the submission is client mode.
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift
    # The executor's JVM options arrive as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order.
    java_opts=()
    while IFS= read -r opt; do
      java_opts+=("$opt")
    done < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//' || true)
    exec java "${java_opts[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "$classpath${SPARK_DIST_CLASSPATH:+:$SPARK_DIST_CLASSPATH}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
      --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  *)
    exec "$venv/bin/tiered-gateway" "$@"
    ;;
esac
