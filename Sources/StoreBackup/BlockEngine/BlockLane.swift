/// The buffers and queue room for one size of block in ``CompressionPipeline``.
///
/// Small files (a blob store's thousands of 128 KiB files) each make one small block.
/// Through 1 MiB buffers, at most `capacity` of them could wait in the queue, so the
/// reader, the workers and the thread that feeds libzip kept waiting for one another and
/// the cores stood partly idle. A lane of small buffers lets more small blocks wait for
/// little memory; its buffers' memory is freed before the manifest is built, where the
/// peak used to be.
struct BlockLane {
    let blockSize: Int
    /// How many of this lane's blocks may wait in the queue at once.
    let capacity: Int
    let inputs: BufferPool
    let outputs: BufferPool

    /// One input more than the queue holds (the block being read); one output more than
    /// the queue holds (the block libzip is being fed). A worker takes its output buffer
    /// after claiming a queued block that has none yet, so at most `capacity - 1` other
    /// queued blocks plus the one being fed hold outputs: one is always free (no deadlock).
    /// Mapped buffers: their memory goes back by ``release()``, before create's peak.
    init(blockSize: Int, capacity: Int) {
        self.blockSize = blockSize
        self.capacity = capacity
        inputs = BufferPool(count: capacity + 1, capacity: blockSize, mapped: true)
        outputs = BufferPool(
            count: capacity + 1, capacity: ArchiveLimits.maxCompressedBlock(blockSize: blockSize), mapped: true)
    }

    func close() {
        inputs.close()
        outputs.close()
    }

    /// Closes the lane and frees the memory of every buffer given back (all of them,
    /// once the pipeline has delivered every block).
    func release() {
        inputs.release()
        outputs.release()
    }
}
