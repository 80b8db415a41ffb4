import COpenBLAS
import Foundation

/// MatAnyone2's working memory for one object, and the memory read: anisotropic-L2 similarity with
/// shrinkage and selection, top-k softmax, sparse readout (upstream `KeyValueMemoryStore` +
/// `MemoryManager.read`; see tools/matanyone2/GLUE.md).
///
/// Storage is token-major (one row of `keyDim` / `valueDim` floats per memory token) so a frame is
/// one contiguous block of rows: the FIFO eviction is a single move. Frame order: the permanent
/// frame first, then temporary frames oldest → newest; at most `maxFrames` frames in all.
final class MemoryBank {
    let keyDim: Int
    let valueDim: Int
    let tokensPerFrame: Int
    let maxFrames: Int
    private(set) var frames = 0

    private let keys: UnsafeMutablePointer<Float>         // [maxFrames·HW, CK]
    private let keysSquared: UnsafeMutablePointer<Float>  // [maxFrames·HW, CK]
    private let shrinkage: UnsafeMutablePointer<Float>    // [maxFrames·HW]
    private let values: UnsafeMutablePointer<Float>       // [maxFrames·HW, CV]
    /// The storage as `MemoryReadoutGraph` reads it (the first `frames`·HW rows are in use).
    var keyRows: UnsafeMutablePointer<Float> { keys }
    var shrinkageRows: UnsafeMutablePointer<Float> { shrinkage }
    var valueRows: UnsafeMutablePointer<Float> { values }
    // Scratch for a read, sized for a full bank: similarity rows for `queryBlock` queries at a time,
    // so the scratch stays bounded however large the working size (a whole [HW, maxFrames·HW] matrix
    // is quadratic in the pixels: 24 GB at 4096×2160).
    private let queryBlock: Int
    private let similarity: UnsafeMutablePointer<Float>   // [queryBlock, maxFrames·HW], query-major
    private let weightedQuery: UnsafeMutablePointer<Float>  // [CK, HW]
    private let querySquared: UnsafeMutablePointer<Float>   // [HW]
    private var topIndex: [Int]
    private var topValue: [Float]
    private var column: [Float]

    /// Bytes of similarity scratch a read may use (one block of query rows).
    static let similarityScratchBytes = 32 << 20

    init(keyDim: Int, valueDim: Int, tokensPerFrame: Int, maxFrames: Int) throws {
        guard keyDim > 0, valueDim > 0, tokensPerFrame > 0, maxFrames >= 1,
              MemoryBank.bytesNeeded(keyDim: keyDim, valueDim: valueDim, tokensPerFrame: tokensPerFrame,
                                     maxFrames: maxFrames) != nil else {
            throw EngineError.badSettings(detail: "a memory bank of \(maxFrames) frames × \(tokensPerFrame) tokens × "
                                          + "\(keyDim)+\(valueDim) channels does not fit in memory")
        }
        self.keyDim = keyDim
        self.valueDim = valueDim
        self.tokensPerFrame = tokensPerFrame
        self.maxFrames = maxFrames
        let capacity = maxFrames * tokensPerFrame
        queryBlock = MemoryBank.queryBlock(tokensPerFrame: tokensPerFrame, maxFrames: maxFrames)
        // All or nothing: what was allocated before a refusal is freed again.
        var owned: [UnsafeMutablePointer<Float>] = []
        do {
            for count in [capacity * keyDim, capacity * keyDim, capacity, capacity * valueDim, queryBlock * capacity,
                          keyDim * tokensPerFrame, tokensPerFrame] {
                owned.append(try allocateFloats(count, for: "the memory bank"))
            }
        } catch {
            owned.forEach { free($0) }
            throw error
        }
        (keys, keysSquared, shrinkage, values) = (owned[0], owned[1], owned[2], owned[3])
        (similarity, weightedQuery, querySquared) = (owned[4], owned[5], owned[6])
        topIndex = []
        topValue = []
        column = [Float](repeating: 0, count: valueDim)
    }

    private static func queryBlock(tokensPerFrame: Int, maxFrames: Int) -> Int {
        guard let rowBytes = checkedProduct([maxFrames, tokensPerFrame, MemoryLayout<Float>.size]), rowBytes > 0 else { return 1 }
        return min(tokensPerFrame, max(1, similarityScratchBytes / rowBytes))
    }

    /// What a bank of this size allocates, in bytes; nil when the arithmetic overflows.
    static func bytesNeeded(keyDim: Int, valueDim: Int, tokensPerFrame: Int, maxFrames: Int) -> Int? {
        let block = queryBlock(tokensPerFrame: max(tokensPerFrame, 1), maxFrames: max(maxFrames, 1))
        return checkedSum([
            checkedProduct([maxFrames, tokensPerFrame, 2 * keyDim + 1 + valueDim]),  // keys, keys², shrinkage, values
            checkedProduct([block, maxFrames, tokensPerFrame]),                      // similarity block
            checkedProduct([keyDim + 1, tokensPerFrame]),                            // weighted query, query²
        ]).flatMap { checkedProduct([$0, MemoryLayout<Float>.size]) }
    }

    deinit {
        for pointer in [keys, keysSquared, shrinkage, values, similarity, weightedQuery, querySquared] {
            free(pointer)
        }
    }

    func clear() { frames = 0 }

    /// How a bank of `frames` makes room for a new one (upstream's FIFO, for both banks): nothing to
    /// do until it is full; then with one frame kept the new one replaces it, else temporary frame 1
    /// (the oldest) goes and the permanent frame 0 stays: `moveDown(rows)` moves the rows of frames
    /// 2… (that many tokens) down one frame. Returns the frames left.
    static func makeRoom(frames: Int, maxFrames: Int, tokensPerFrame: Int, moveDown: (Int) throws -> Void) rethrows -> Int {
        guard frames == maxFrames else { return frames }
        if maxFrames == 1 { return 0 }
        try moveDown((frames - 2) * tokensPerFrame)
        return frames - 1
    }

    /// Adds a frame: `key` [CK, HW] and `value` [CV, HW] channel-major as the models give them,
    /// `frameShrinkage` [HW]. The first frame of an empty bank is permanent; past `maxFrames` the
    /// oldest temporary frame goes.
    func add(key: UnsafePointer<Float>, shrinkage frameShrinkage: UnsafePointer<Float>, value: UnsafePointer<Float>) {
        let hw = tokensPerFrame
        frames = MemoryBank.makeRoom(frames: frames, maxFrames: maxFrames, tokensPerFrame: hw) { move in
            keys.advanced(by: hw * keyDim).update(from: keys.advanced(by: 2 * hw * keyDim), count: move * keyDim)
            keysSquared.advanced(by: hw * keyDim).update(from: keysSquared.advanced(by: 2 * hw * keyDim), count: move * keyDim)
            shrinkage.advanced(by: hw).update(from: shrinkage.advanced(by: 2 * hw), count: move)
            values.advanced(by: hw * valueDim).update(from: values.advanced(by: 2 * hw * valueDim), count: move * valueDim)
        }
        let first = frames * hw
        for token in 0..<hw {
            let keyRow = keys + (first + token) * keyDim
            let squaredRow = keysSquared + (first + token) * keyDim
            for c in 0..<keyDim {
                let k = key[c * hw + token]
                keyRow[c] = k
                squaredRow[c] = k * k
            }
            let valueRow = values + (first + token) * valueDim
            for c in 0..<valueDim { valueRow[c] = value[c * hw + token] }
            shrinkage[first + token] = frameShrinkage[token]
        }
        frames += 1
    }

    /// Reads memory for a query frame: `queryKey`, `selection` [CK, HW] → `readout` [CV, HW].
    ///
    ///   S[q, n] = (−Σc sel·mk² + 2·Σc (qk·sel)·mk − Σc sel·qk²) · shrink[n] / √CK
    ///
    /// then for every query q the `topK` largest S[q, ·], softmax over them (max subtracted:
    /// upstream does not, and gets NaN when all are below ≈ −87), and the weighted sum of values.
    func read(queryKey: UnsafePointer<Float>, selection: UnsafePointer<Float>, topK: Int,
              into readout: UnsafeMutablePointer<Float>) {
        precondition(frames > 0)
        let hw = tokensPerFrame, ck = keyDim, cv = valueDim
        let n = frames * hw
        for index in 0..<(ck * hw) { weightedQuery[index] = queryKey[index] * selection[index] }
        for q in 0..<hw { querySquared[q] = 0 }
        for c in 0..<ck {
            for q in 0..<hw { querySquared[q] += weightedQuery[c * hw + q] * queryKey[c * hw + q] }
        }
        let scale = 1 / Float(ck).squareRoot()
        let k = min(topK, n)
        if topIndex.count != k {
            topIndex = [Int](repeating: 0, count: k)
            topValue = [Float](repeating: 0, count: k)
        }
        topIndex.withUnsafeMutableBufferPointer { indexBuffer in
        topValue.withUnsafeMutableBufferPointer { valueBuffer in
        column.withUnsafeMutableBufferPointer { columnBuffer in
            let best = indexBuffer.baseAddress!, bestValue = valueBuffer.baseAddress!, sum = columnBuffer.baseAddress!
            for q in 0..<hw {
                let blockRow = q % queryBlock
                if blockRow == 0 { computeSimilarity(from: q, selection: selection, count: n) }
                let row = similarity + blockRow * n
                let bSquared = querySquared[q]
                for m in 0..<n { row[m] = (row[m] - bSquared) * shrinkage[m] * scale }
                MemoryBank.selectTop(k, of: row, count: n, index: best, value: bestValue)
                // Softmax over the k (bestValue[0] is the largest).
                let maximum = bestValue[0]
                var total: Float = 0
                for j in 0..<k {
                    bestValue[j] = expf(bestValue[j] - maximum)
                    total += bestValue[j]
                }
                let inverse = 1 / total
                for c in 0..<cv { sum[c] = 0 }
                for j in 0..<k {
                    let weight = bestValue[j] * inverse
                    let valueRow = values + best[j] * cv
                    for c in 0..<cv { sum[c] += weight * valueRow[c] }
                }
                for c in 0..<cv { readout[c * hw + q] = sum[c] }
            }
        }}}
    }

    /// Similarity rows for queries first..<first + queryBlock (fewer at the end):
    /// S = −selᵀ·(mk²)ᵀ + 2·(qk⊙sel)ᵀ·mkᵀ, query-major [rows, N], before the query² and shrinkage terms.
    private func computeSimilarity(from first: Int, selection: UnsafePointer<Float>, count n: Int) {
        let hw = tokensPerFrame, ck = keyDim
        let rows = min(queryBlock, hw - first)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, Int32(rows), Int32(n), Int32(ck),
                    -1, selection + first, Int32(hw), keysSquared, Int32(ck), 0, similarity, Int32(n))
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, Int32(rows), Int32(n), Int32(ck),
                    2, weightedQuery + first, Int32(hw), keys, Int32(ck), 1, similarity, Int32(n))
    }

    /// The `k` largest of `row[0..<count]`, sorted descending, by insertion into a small sorted list.
    private static func selectTop(_ k: Int, of row: UnsafePointer<Float>, count: Int,
                                  index: UnsafeMutablePointer<Int>, value: UnsafeMutablePointer<Float>) {
        var filled = 0
        for m in 0..<count {
            let v = row[m]
            if filled == k && v <= value[k - 1] { continue }
            var position = filled < k ? filled : k - 1
            while position > 0 && value[position - 1] < v {
                value[position] = value[position - 1]
                index[position] = index[position - 1]
                position -= 1
            }
            value[position] = v
            index[position] = m
            if filled < k { filled += 1 }
        }
    }
}
