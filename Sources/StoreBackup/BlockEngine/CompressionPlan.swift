/// What ``CompressionPipeline`` reads, in order: one compact ``Job`` per entry with data.
///
/// A store of many small files has a job per file, alive until the archive is closed, so a
/// job is 16 bytes that point into the item lists instead of a copy of its ``StoreItem``
/// (two path strings); the databases' snapshots, a handful, are looked up by job.
struct CompressionPlan {
    enum Method: UInt8 {
        case deflate, store
        /// Deflate at level 0 (stored deflate blocks): how incompressible files go into an
        /// encrypted archive. libzip cannot take encrypted data declared as STORE as it is
        /// (zip_close.c add_data would compute the CRC of the ciphertext), but it copies
        /// encrypted DEFLATE data unchanged. The cost is 5 bytes per 64 KiB.
        case storedDeflate
    }

    struct Job {
        /// Where the job's item is: below `items.count` in `items`, above in `extras`.
        let item: Int32
        let method: Method
        /// The bytes expected (the snapshot's size for a database).
        let plannedSize: Int64
    }

    /// The store's items, shared with the caller (not copied).
    let items: [StoreItem]
    /// Entries that are not the store's (a chain's page deltas and maps), after its items.
    let extras: [StoreItem]
    private(set) var jobs: [Job] = []
    /// By job index: the databases' consistent snapshots, read instead of their files.
    private(set) var snapshots: [Int: DatabaseSnapshot] = [:]
    /// Parallel to `items`: each item's job index, or -1 (a folder, a link, a file with no entry).
    private var jobOfItem: [Int32]

    init(items: [StoreItem], extras: [StoreItem] = []) {
        self.items = items
        self.extras = extras
        jobOfItem = [Int32](repeating: -1, count: items.count)
    }

    mutating func reserveJobs(_ count: Int) { jobs.reserveCapacity(count) }

    /// Adds a job for `items[index]` (or, from `items.count` on, the extra after them).
    mutating func addJob(item index: Int, method: Method, plannedSize: Int64, snapshot: DatabaseSnapshot?) {
        let jobIndex = jobs.count
        if index < items.count { jobOfItem[index] = Int32(jobIndex) }
        if let snapshot { snapshots[jobIndex] = snapshot }
        jobs.append(Job(item: Int32(index), method: method, plannedSize: plannedSize))
    }

    /// The job of `items[index]`, if it has one.
    func job(ofItem index: Int) -> Int? {
        let job = jobOfItem[index]
        return job < 0 ? nil : Int(job)
    }

    /// The item a job reads.
    func item(ofJob jobIndex: Int) -> StoreItem {
        let index = Int(jobs[jobIndex].item)
        return index < items.count ? items[index] : extras[index - items.count]
    }

    var totalPlannedSize: Int64 { jobs.reduce(0) { $0 + $1.plannedSize } }
}
