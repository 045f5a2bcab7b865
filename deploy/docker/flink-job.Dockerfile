# syntax=docker/dockerfile:1.7
# The Flink jobs' image: the JobManager and TaskManagers of every FlinkDeployment (deploy/k8s/base/jobs) run it.
# Flink 2.2 with Python 3.11 and this project (PyFlink runs the jobs' Python code in both), the Kafka SQL
# connector and the Avro format in lib/, flink-python in lib/ (the PythonDriver that starts a Python job in
# application mode), the Prometheus reporter and the S3 and GCS file systems as plugins (checkpoints, savepoints
# and the archive live on object storage), and the prebuilt UDF jar where the jobs look for it.
#
# Build from the repository root after `bash infra/bootstrap.sh` (which builds jobs/jvm/target/adserve-udf-0.1.0.jar
# with Maven):
#   docker build -f deploy/docker/flink-job.Dockerfile -t REGISTRY/adserve-flink:TAG .
ARG FLINK_IMAGE=flink:2.2.1-java17
FROM ${FLINK_IMAGE}

ARG PYTHON_VERSION=3.11.11
USER root
# Python 3.11 built from source, as Flink's own PyFlink image recipe does: the base image's Ubuntu ships another
# minor version, and apache-flink 2.2.1 has wheels for 3.11.
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends build-essential ca-certificates curl libbz2-dev libffi-dev \
        liblzma-dev libsqlite3-dev libssl-dev zlib1g-dev; \
    curl -fsSL "https://www.python.org/ftp/python/${PYTHON_VERSION}/Python-${PYTHON_VERSION}.tgz" | tar -xz -C /tmp; \
    cd "/tmp/Python-${PYTHON_VERSION}"; \
    ./configure --without-tests --enable-shared --prefix=/usr/local; \
    make -j"$(nproc)"; \
    make install; \
    ldconfig /usr/local/lib; \
    ln -sf /usr/local/bin/python3.11 /usr/local/bin/python; \
    cd /; rm -rf "/tmp/Python-${PYTHON_VERSION}"; \
    rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ADSERVE_HOME=/opt/adserve-home \
    ADSERVE_SETTINGS_FILE=/etc/adserve/settings.toml \
    ADSERVE_FLINK_KAFKA_JAR=/opt/flink/lib/flink-sql-connector-kafka-5.0.0-2.2.jar \
    ADSERVE_FLINK_AVRO_JAR=/opt/flink/lib/flink-sql-avro-2.1.0.jar \
    NUMBA_CACHE_DIR=/tmp/numba-cache

WORKDIR /opt/adserve
COPY pyproject.toml README.md ./
COPY adserve ./adserve
COPY core ./core
COPY schemas ./schemas
COPY streams ./streams
COPY jobs ./jobs
COPY pipelines ./pipelines
COPY serving ./serving
COPY learning ./learning
COPY sim ./sim
COPY bench ./bench
COPY infra ./infra
# Editable: the jobs find their UDF jar beside their sources (jobs/jvm/target), as in a checkout. Beam's extra for
# the object storage the jobs read side files from (the budget job's curves, through Beam's FileSystems): aws for
# s3://, gcp for gs://.
ARG BEAM_EXTRAS=aws
RUN python3.11 -m pip install -e /opt/adserve "apache-beam[${BEAM_EXTRAS}]==2.61.0"
COPY jobs/jvm/target/adserve-udf-0.1.0.jar /opt/adserve/jobs/jvm/target/adserve-udf-0.1.0.jar

# The same Maven Central artifacts infra/maven/*/pom.xml fetch for the local platform, pinned by checksum.
ADD --chmod=644 --checksum=sha256:5605c691d11a501382c383fecba37a7a552467da5ab7ba904ef5d6f3d62c5616 \
    https://repo1.maven.org/maven2/org/apache/flink/flink-sql-connector-kafka/5.0.0-2.2/flink-sql-connector-kafka-5.0.0-2.2.jar \
    /opt/flink/lib/
ADD --chmod=644 --checksum=sha256:32c898a913615429a80b8cdcb1b93616bdb3a083363eb997d2b278d4eee62370 \
    https://repo1.maven.org/maven2/org/apache/flink/flink-sql-avro/2.1.0/flink-sql-avro-2.1.0.jar \
    /opt/flink/lib/
RUN set -eux; \
    cd /opt/flink; \
    cp opt/flink-python-*.jar lib/; \
    rm -rf plugins/metrics-prometheus; \
    mkdir -p plugins/s3-fs-presto plugins/gs-fs-hadoop usrlib; \
    cp opt/flink-s3-fs-presto-*.jar plugins/s3-fs-presto/; \
    cp opt/flink-gs-fs-hadoop-*.jar plugins/gs-fs-hadoop/; \
    ln -s /opt/adserve/jobs/jvm/target/adserve-udf-0.1.0.jar usrlib/adserve-udf-0.1.0.jar; \
    mkdir -p /opt/adserve-home /tmp/numba-cache; \
    chown -R flink:flink /opt/flink/lib /opt/flink/plugins /opt/flink/usrlib /opt/adserve-home /tmp/numba-cache

# The reporter of the version the project pins, alone in its plugin folder (the dist's copy is removed above).
ADD --chmod=644 --checksum=sha256:dce8fc14f3a97d72e5fede1abc4875422529f6654a570df94c472daa841b247b \
    https://repo1.maven.org/maven2/org/apache/flink/flink-metrics-prometheus/2.2.0/flink-metrics-prometheus-2.2.0.jar \
    /opt/flink/plugins/metrics-prometheus/

USER flink
WORKDIR /opt/flink
