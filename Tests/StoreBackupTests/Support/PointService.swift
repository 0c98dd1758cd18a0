import Foundation
import Logging

@testable import StoreBackup

/// The scheduler as the point tests run it: one incremental job every minute on a small
/// fixture store in `work`, its clock injected (starting at a fixed date) and a 50 ms racy
/// window, with the destination the closure gives at each run; `configure` adjusts the job.
struct PointService {
    let service: BackupService
    let job: StoreJob
    let clock: Locked<Date>

    init(
        work: String, configure: (inout StoreJob) -> Void = { _ in },
        destination: @escaping @Sendable () -> any BackupDestination
    ) throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 50, blobCount: 1)
        let clock = Locked(Date(timeIntervalSince1970: 1_796_464_800))
        var job = StoreJob(name: "app", storesDirectory: store, destination: "s3", schedule: try Schedule.parse("every 1m"))
        job.incremental = IncrementalPolicy()
        configure(&job)
        service = BackupService(
            jobs: [job], stateStore: BackupStateStore(directory: work + "/state"), destinationOptions: DestinationOptions(),
            logger: Logger(label: "points"), proofKeyFile: work + "/proof.key", now: { clock.withLock { $0 } },
            resolveDestination: { _, _ in destination() }, racyWindowNanoseconds: 50_000_000)
        self.job = job
        self.clock = clock
    }
}
