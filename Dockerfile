# The controller image: `docker build -t quartermaster:dev .` (e2e/kind.sh does this).
# Two stages: wheels are built with pip in a full image; the final image is python:3.11-slim
# with only the installed package (without the replay's plotting extra `.[sim]`; the test
# harness `testenv/` is not part of the package), no compiler, no pip cache, running as an
# unprivileged user with a read-only root filesystem (the Deployment mounts /tmp as an emptyDir).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY controller ./controller
RUN python -m venv /opt/quartermaster \
 && /opt/quartermaster/bin/pip install --upgrade pip \
 && /opt/quartermaster/bin/pip install . \
 && find /opt/quartermaster -name '__pycache__' -prune -exec rm -rf {} +

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="quartermaster" \
      org.opencontainers.image.description="Deadline-aware GPU capacity controller for Kueue, Karpenter and KEDA" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/quartermaster /opt/quartermaster
ENV PATH=/opt/quartermaster/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# 65532 is the conventional "nonroot" user of distroless images; the Deployment runs as it too.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["quartermaster"]
CMD ["run"]
