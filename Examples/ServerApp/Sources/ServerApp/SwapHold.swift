/// A test hook (only with `SERVERAPP_TEST_HOLD_SWAP=1`): holds a restore inside `willSwap`,
/// after the store has been paused, until `POST /admin/test/release-swap`, so a test can
/// watch the app answer 503 during the swap without guessing at timing.
actor SwapHold {
    let enabled: Bool
    private var waiter: CheckedContinuation<Void, Never>?
    private var releasedEarly = false

    init(enabled: Bool) { self.enabled = enabled }

    /// Waits for `release()` (or returns at once when it already came, or when disabled).
    func waitForRelease() async {
        guard enabled else { return }
        if releasedEarly { releasedEarly = false; return }
        await withCheckedContinuation { waiter = $0 }
    }

    /// Lets a held swap go on; remembered when no swap is waiting yet.
    func release() {
        if let waiter {
            self.waiter = nil
            waiter.resume()
        } else {
            releasedEarly = true
        }
    }
}
