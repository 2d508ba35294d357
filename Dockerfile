# takoform-operator image. Not built in CI here (no container engine on the CI machines); the
# Python package it installs is what `make test` tests.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
RUN useradd --uid 65532 --create-home takoform
COPY --from=build /install /usr/local
USER 65532
# The operator's entry point; settings come from TAKOFORM_* environment variables.
ENTRYPOINT ["takoform-operator"]
CMD ["--help"]
