package handoff

import "io"

// ReadReply reads the host's next reply from r, for the tests of package
// handoff_test that speak for a client that is not Start.
func ReadReply(r io.Reader) (started, reported bool, status int, errText string, err error) {
	b, err := readFrame(r, maxReply)
	if err != nil {
		return false, false, 0, "", err
	}
	var rep reply
	if err := decodeReply(b, &rep); err != nil {
		return false, false, 0, "", err
	}
	return rep.Started, rep.Reported, rep.Status, rep.Error, nil
}

// EncodeControl returns the frame of a signal sent to the command.
func EncodeControl(sig int) ([]byte, error) { return encodeControl(control{Signal: sig}) }
