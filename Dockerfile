# The image deploy/k8s's TFJob manifests run (ghcr.io/engine-project/engine): the `engine`
# binary on a slim Debian with the Fashion-MNIST data the shipped specs read.
#
#   docker build -t ghcr.io/engine-project/engine:latest .
#   docker run --rm ghcr.io/engine-project/engine:latest run specs/fashion_mnist_cnn.ron
#
# GPU builds: add `--build-arg FEATURES=wgpu` (Vulkan drivers are then needed at run time).

FROM rust:1.95-slim-bookworm AS build
ARG FEATURES=""
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p engine-cli ${FEATURES:+--features "$FEATURES"} \
    && cp target/release/engine /engine

FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates dataset-fashion-mnist \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /engine /usr/local/bin/engine
COPY specs /opt/engine/specs
WORKDIR /opt/engine
# TF_CONFIG, Slurm's variables or --cluster flags configure a cluster; model dirs may be
# s3:// URLs (AWS_* variables) so that every task of a job sees them.
ENTRYPOINT ["engine"]
CMD ["run", "specs/fashion_mnist_cnn.ron"]
