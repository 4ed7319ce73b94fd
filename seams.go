package mongolock

// Seams for the tests, which replace them; they do nothing otherwise.
var (
	testHookSend      = func(p *Provider, mode attemptMode) {}            // as an acquisition round trip is about to be sent
	testHookReply     = func(p *Provider, err error) error { return err } // replaces a round trip's error
	testHookListBatch = func(p *Provider) int32 { return 0 }              // a listing's batch size, if not 0
)
