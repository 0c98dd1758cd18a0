import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// libzip turns every entry's DOS time into a `time_t` with `mktime`, and glibc's `mktime`
/// with `TZ` unset looks at `/etc/localtime` again on each call (a `stat` per call, two per
/// entry of an archive). With `TZ` naming that same file, glibc sees an unchanged value and
/// reads nothing: the zone is the one the process would have used anyway. Set before any
/// other thread runs, and only when `TZ` is unset; the library leaves an app's environment
/// as it is.
enum LocalTimeZone {
    static func pin() {
        guard getenv("TZ") == nil else { return }
        setenv("TZ", ":/etc/localtime", 0)
    }
}
