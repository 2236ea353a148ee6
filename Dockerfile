# The metastore node image used by docker-compose.yml (cluster mode) and usable alone
# (embedded mode): `docker run -p 8181:8181 -v metastore-data:/data <image>`.
# confluent-kafka and rocksdict ship manylinux wheels, so no compiler is needed.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# What the wheel is built from (pyproject.toml: readme, packages, force-include).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY metastore ./metastore
COPY workers ./workers
COPY schemas ./schemas
COPY topics ./topics
RUN pip install . && rm -rf /src

# Non-root; /data exists and is owned by the user so a fresh named volume mounted
# there inherits that ownership.
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/metastore metastore \
    && mkdir /data \
    && chown metastore:metastore /data
USER metastore
WORKDIR /home/metastore
ENV METASTORE_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 8181

ENTRYPOINT ["metastore"]
CMD ["serve", "--host", "0.0.0.0"]
