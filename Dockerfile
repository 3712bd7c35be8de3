# rigger's image: the static binary that `make build` produces, nothing else.
# Build it with the local engine and no registry:
#   make build && docker build -t rigger/rigger:dev .
# The same image serves as rigger's node helper (file writer, nginx-proxy) and
# runs `rigger serve` or `rigger agent` in a cluster.
FROM scratch
COPY bin/rigger /usr/local/bin/rigger
ENTRYPOINT ["/usr/local/bin/rigger"]
