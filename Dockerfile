# rigger's image: the static binary that `make build` produces and a CA
# bundle, nothing else. Build it with the local engine and no registry:
#   make image        (make build, copy the CA bundle into bin/, docker build -t rigger/rigger:dev .)
# The same image serves as rigger's node helper (file writer, nginx-proxy) and
# runs `rigger serve` or `rigger agent` in a cluster. It sets no USER: node
# helpers run as root; deploy/deployment.yaml runs serve as a non-root user.
FROM scratch
# HTTPS to git forges and S3: Go reads this file for the system's CAs.
COPY bin/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY bin/rigger /usr/local/bin/rigger
ENTRYPOINT ["/usr/local/bin/rigger"]
