# takoform-operator image. Build it with `make image` (hack/image.sh): Docker when a daemon
# answers, else buildah with a base made here from Debian packages (hack/image/base.sh).
#
# BASE_IMAGE must have the layout of the official python slim images: Python 3.11 whose prefix
# (site-packages, scripts) is /usr/local, pip, and useradd. hack/image.sh passes it by digest
# (name@sha256:...) and refuses a tag alone unless told otherwise (docs/deployment.md); the
# default below is only the name of the layout it expects.
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm
# What the base is (hack/image.sh): recorded as the OCI base labels of the image.
ARG BASE_NAME=""
ARG BASE_DIGEST=""

FROM ${BASE_IMAGE} AS build
# Docker builds have no network: hack/image.sh downloads the locked wheels into build/wheels and
# sets PIP_NO_INDEX=1, so pip installs from there only (buildah builds reach PyPI).
ARG PIP_NO_INDEX=0
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# Dependencies first, in their own prefix and layer: a code change reuses this layer. Exactly the
# versions and files of the lock (`make lock`, from pyproject.toml): every file's sha256 is
# checked, nothing is resolved here, no source distribution is built. `pip check` fails the
# build if the lock misses a dependency of what it locks.
COPY requirements.lock requirements-build.lock ./
COPY build/wheels/ /wheels/
RUN pip install --require-hashes --no-deps --only-binary=:all: --find-links /wheels --prefix=/deps \
      -r requirements.lock \
 && pip install --require-hashes --no-deps --only-binary=:all: --find-links /wheels \
      -r requirements-build.lock \
 && PYTHONPATH=/deps/lib/python3.11/site-packages python3 -m pip check
# Then the project itself, without dependencies and without build isolation (nothing to download).
COPY pyproject.toml README.md LICENSE NOTICE ./
COPY operator ./operator
RUN pip install --prefix=/app --no-deps --no-build-isolation . \
 && rm -rf build operator/*.egg-info

# The runtime's root filesystem: the base with the operator's user, without pip (nor setuptools,
# wheel, ensurepip's bundled wheels) and without a shell. The chart's probes are httpGet and the
# entrypoint is exec'd directly, so nothing needs one. hack/image/check_image.py fails the build
# if any of them is in the image.
FROM ${BASE_IMAGE} AS root
RUN groupadd --gid 65532 takoform \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin takoform \
 && (python3 -m pip uninstall --quiet --yes pip setuptools wheel 2>/dev/null || true) \
 && rm -rf /usr/local/bin/pip* /usr/local/bin/wheel /usr/local/lib/python3*/ensurepip \
      /usr/lib/python3*/ensurepip /usr/share/python-wheels \
      /usr/local/lib/python3*/site-packages/pip* /usr/local/lib/python3*/site-packages/setuptools* \
      /usr/local/lib/python3*/site-packages/wheel* /usr/local/lib/python3*/site-packages/_distutils_hack \
      /usr/local/lib/python3*/site-packages/pkg_resources /usr/local/lib/python3*/site-packages/distutils-precedence.pth \
      /var/cache/* /var/log/* /root/.cache \
 && rm -f /usr/bin/sh /usr/bin/dash /usr/bin/bash /usr/bin/rbash /bin/sh /bin/dash /bin/bash /bin/rbash

# From scratch: the layers of the base (which have pip and a shell) are not part of the image.
FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
# Where the source lives (hack/image.sh passes the git remote when there is one).
ARG SOURCE=""
ARG BASE_NAME
ARG BASE_DIGEST
LABEL org.opencontainers.image.title="takoform-operator" \
      org.opencontainers.image.description="Kubernetes operator for Takoform resources" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_NAME}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}"
COPY --from=root / /
COPY --from=build /deps /usr/local
COPY --from=build /app /usr/local
COPY LICENSE NOTICE /usr/share/doc/takoform-operator/
# Read-only root filesystem in the chart: nothing may need to write bytecode at run time; what
# Python writes (tempfile) goes to /tmp, the chart's bounded emptyDir.
ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
# Settings come from TAKOFORM_* environment variables (docs/operator.md, docs/deployment.md).
ENTRYPOINT ["takoform-operator"]
CMD ["run"]
