import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A mutex with several condition variables, so that a change wakes only the threads
/// waiting for that kind of change.
///
/// `NSCondition` has one: in a pipeline where a reader, workers and a writer all wait on
/// it, every broadcast wakes all of them, and most go straight back to sleep: with
/// thousands of one-block files that is a context switch per hand-off for nothing.
// Unchecked: the pthread objects are used only through their own calls, which are thread-safe.
final class Monitor: @unchecked Sendable {
    /// One reason to wait, tied to the monitor's mutex.
    final class Condition: @unchecked Sendable {
        fileprivate let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
        private unowned let monitor: Monitor

        fileprivate init(monitor: Monitor) {
            self.monitor = monitor
            var attributes = pthread_condattr_t()
            pthread_condattr_init(&attributes)
            pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
            pthread_cond_init(cond, &attributes)
            pthread_condattr_destroy(&attributes)
        }

        deinit {
            pthread_cond_destroy(cond)
            cond.deallocate()
        }

        /// Waits (the lock held) until signalled or `seconds` pass; the caller rechecks its state.
        func wait(seconds: Double) {
            var deadline = timespec()
            clock_gettime(CLOCK_MONOTONIC, &deadline)
            let nanoseconds = Int(deadline.tv_nsec) + Int(seconds * 1e9)
            deadline.tv_sec += nanoseconds / 1_000_000_000
            deadline.tv_nsec = nanoseconds % 1_000_000_000
            _ = pthread_cond_timedwait(cond, monitor.mutex, &deadline)
        }

        /// Wakes one waiter (call with the lock held).
        func signal() { pthread_cond_signal(cond) }

        /// Wakes every waiter (call with the lock held).
        func broadcast() { pthread_cond_broadcast(cond) }
    }

    fileprivate let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    init() { pthread_mutex_init(mutex, nil) }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func makeCondition() -> Condition { Condition(monitor: self) }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
}
