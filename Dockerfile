# takoform-operator image. Build it with `make image` (hack/image.sh): Docker when a daemon
# answers, else buildah with a base made here from Debian packages (hack/image/base.sh).
#
# BASE_IMAGE must have the layout of the official python slim images: Python 3.11 whose prefix
# (site-packages, scripts) is /usr/local, pip, and useradd.
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# Dependencies first, in their own prefix and layer: a code change reuses this layer. The list is
# read from pyproject.toml, so there is no second copy to keep in step.
COPY pyproject.toml ./
RUN python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" >requirements.txt \
 && pip install --prefix=/deps -r requirements.txt \
 && pip install "setuptools>=69" wheel
# Then the project itself, without dependencies and without build isolation (nothing to download).
COPY README.md LICENSE NOTICE ./
COPY operator ./operator
RUN pip install --prefix=/app --no-deps --no-build-isolation . \
 && rm -rf build operator/*.egg-info

FROM ${BASE_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
# Where the source lives (hack/image.sh passes the git remote when there is one).
ARG SOURCE=""
LABEL org.opencontainers.image.title="takoform-operator" \
      org.opencontainers.image.description="Kubernetes operator for Takoform resources" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 65532 takoform \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin takoform
COPY --from=build /deps /usr/local
COPY --from=build /app /usr/local
COPY LICENSE NOTICE /usr/share/doc/takoform-operator/
# Read-only root filesystem in the chart: nothing may need to write bytecode at run time.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
# Settings come from TAKOFORM_* environment variables (docs/operator.md, docs/deployment.md).
ENTRYPOINT ["takoform-operator"]
CMD ["run"]
