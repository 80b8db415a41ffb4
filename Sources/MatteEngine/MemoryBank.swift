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
    // Scratch for a read, sized for a full bank.
    private let similarity: UnsafeMutablePointer<Float>   // [HW, maxFrames·HW], query-major
    private let weightedQuery: UnsafeMutablePointer<Float>  // [CK, HW]
    private let querySquared: UnsafeMutablePointer<Float>   // [HW]
    private var topIndex: [Int]
    private var topValue: [Float]
    private var column: [Float]

    init(keyDim: Int, valueDim: Int, tokensPerFrame: Int, maxFrames: Int) {
        precondition(maxFrames >= 1)
        self.keyDim = keyDim
        self.valueDim = valueDim
        self.tokensPerFrame = tokensPerFrame
        self.maxFrames = maxFrames
        let capacity = maxFrames * tokensPerFrame
        keys = .allocate(capacity: capacity * keyDim)
        keysSquared = .allocate(capacity: capacity * keyDim)
        shrinkage = .allocate(capacity: capacity)
        values = .allocate(capacity: capacity * valueDim)
        similarity = .allocate(capacity: tokensPerFrame * capacity)
        weightedQuery = .allocate(capacity: keyDim * tokensPerFrame)
        querySquared = .allocate(capacity: tokensPerFrame)
        topIndex = []
        topValue = []
        column = [Float](repeating: 0, count: valueDim)
    }

    deinit {
        for pointer in [keys, keysSquared, shrinkage, values, similarity, weightedQuery, querySquared] {
            pointer.deallocate()
        }
    }

    func clear() { frames = 0 }

    /// Adds a frame: `key` [CK, HW] and `value` [CV, HW] channel-major as the models give them,
    /// `frameShrinkage` [HW]. The first frame of an empty bank is permanent; past `maxFrames` the
    /// oldest temporary frame goes.
    func add(key: UnsafePointer<Float>, shrinkage frameShrinkage: UnsafePointer<Float>, value: UnsafePointer<Float>) {
        let hw = tokensPerFrame
        if frames == maxFrames {
            if maxFrames == 1 {
                frames = 0
            } else {
                // Drop temporary frame 1 (the oldest), keep the permanent frame 0.
                let move = (frames - 2) * hw
                keys.advanced(by: hw * keyDim).update(from: keys.advanced(by: 2 * hw * keyDim), count: move * keyDim)
                keysSquared.advanced(by: hw * keyDim)
                    .update(from: keysSquared.advanced(by: 2 * hw * keyDim), count: move * keyDim)
                shrinkage.advanced(by: hw).update(from: shrinkage.advanced(by: 2 * hw), count: move)
                values.advanced(by: hw * valueDim)
                    .update(from: values.advanced(by: 2 * hw * valueDim), count: move * valueDim)
                frames -= 1
            }
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
        // S = −selᵀ·(mk²)ᵀ + 2·(qk⊙sel)ᵀ·mkᵀ, query-major [HW, N].
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, Int32(hw), Int32(n), Int32(ck),
                    -1, selection, Int32(hw), keysSquared, Int32(ck), 0, similarity, Int32(n))
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, Int32(hw), Int32(n), Int32(ck),
                    2, weightedQuery, Int32(hw), keys, Int32(ck), 1, similarity, Int32(n))
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
                let row = similarity + q * n
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
