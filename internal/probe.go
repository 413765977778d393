package internal

import (
	_ "github.com/caddyserver/certmagic"
	_ "github.com/coder/websocket"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/collectors"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/quic-go/quic-go/http3"
	_ "go.uber.org/zap"
	_ "golang.org/x/net/http2"
	_ "golang.org/x/net/http2/h2c"
)
