# Builds the posting binary; the image runs `posting serve` by default.
FROM golang:1.26-alpine AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/posting ./cmd/posting

FROM alpine:3.22
RUN adduser -D -u 10001 posting && apk add --no-cache ca-certificates wget
COPY --from=build /out/posting /usr/local/bin/posting
USER posting
WORKDIR /home/posting
ENV POSTING_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["posting"]
CMD ["serve"]
