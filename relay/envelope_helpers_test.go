package relay

// DecodeEnvelope is decodeEnvelope with its violations joined (errors.Join), for tests.
func DecodeEnvelope(frame []byte) (Envelope, error) {
	env, e := decodeEnvelope(frame)
	return env, e.Err()
}
