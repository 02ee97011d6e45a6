"""TfIdfVectorizer against onnxruntime, exactly but for TFIDF's weighted counts (within a
float32 rounding: below), and
against the ONNX reference in mode TF (in modes IDF and TFIDF it fails without weights and
weighs output i by weights[i], where the ONNX text and onnxruntime give weights[i] to the i-th
n-gram, wherever ngram_indexes puts it: test_weights_follow_their_ngram): every mode with and without weights, skips, n-grams of mixed
lengths, int32 and int64 tokens, batches, a pool with repeated and prefix n-grams and output
indexes out of order, and refusals."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from mlcc.errors import ModelError, UnsupportedError
from util import compile_and_run, make_model

# unigrams 2, 3, 5, 7, 11, bigrams (2, 3), (3, 5), (5, 5),
# (7, 2), trigrams (2, 3, 5), (5, 5, 5); indexes permuted
POOL = dict(pool_int64s=[2, 3, 5, 7, 11, 2, 3, 3, 5, 5, 5, 7, 2, 2, 3, 5, 5, 5, 5],
            ngram_counts=[0, 5, 13], ngram_indexes=[7, 0, 4, 3, 9, 1, 2, 8, 6, 10, 5])
WEIGHTS = [0.5, 1.25, 2.0, 3.0, 0.1, 7.5, 1.0, 0.3, 4.0, 9.0, 2.5]


def _tokens(shape, dtype, seed):
    """Tokens drawn mostly from the pool's ids, some outside it (and a negative one)."""
    rng = np.random.default_rng(seed)
    return rng.choice([2, 3, 5, 7, 2, 3, 5, 5, 1, -4, 11], size=shape).astype(dtype)


def _check(tmp_path, x, **attrs):
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
    feeds = {"x": x}
    model = make_model([node], feeds, ["y"], opset=9)
    got = compile_and_run(model, feeds, tmp_path)["y"]
    with_ort = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.dtype == np.float32 and got.shape == with_ort.shape
    if attrs["mode"] == "TFIDF" and attrs.get("weights"):
        # weight times count, as the ONNX text; onnxruntime adds the weight once per match
        # (0.3 eight times is 2.3999999 in float32, 8 x 0.3 is 2.4000001)
        np.testing.assert_allclose(got, with_ort, rtol=1e-6, atol=0)
    else:
        np.testing.assert_array_equal(got, with_ort)
    if attrs["mode"] == "TF":
        np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feeds)[0])
    return got


@pytest.mark.parametrize("mode,weights", [("TF", None), ("IDF", None), ("IDF", WEIGHTS),
                                          ("TFIDF", None), ("TFIDF", WEIGHTS),
                                          ("TF", WEIGHTS)])
@pytest.mark.parametrize("shape,dtype", [((3, 17), "int64"), ((23,), "int32")])
def test_modes(tmp_path, mode, weights, shape, dtype):
    """Unigrams to trigrams with up to 2 skips, batch and single row, each mode."""
    extra = {} if weights is None else {"weights": weights}
    got = _check(tmp_path, _tokens(shape, dtype, seed=len(shape)), mode=mode,
                 min_gram_length=1, max_gram_length=3, max_skip_count=2, **POOL, **extra)
    assert (got > 0).sum() >= 6        # the tokens meet most n-grams of the pool


@pytest.mark.parametrize("lo,hi,skip", [(1, 1, 0), (1, 1, 4), (2, 2, 0), (2, 3, 1),
                                        (3, 3, 3), (1, 2, 5), (2, 3, 30)])
def test_gram_lengths_and_skips(tmp_path, lo, hi, skip):
    """Only unigrams (a skip changes nothing), only bigrams, bigrams and trigrams, skips
    beyond the row's length."""
    _check(tmp_path, _tokens((2, 13), "int64", seed=3 + skip), mode="TF", min_gram_length=lo,
           max_gram_length=hi, max_skip_count=skip, **POOL)


def test_edge_inputs(tmp_path):
    """A row shorter than an n-gram, a pool of bigrams only whose unigram slot is empty, an
    input of one token, and tokens beyond int32 in the pool (never met by int32 tokens)."""
    _check(tmp_path, np.array([[5, 5], [2, 3]], np.int64), mode="TF", min_gram_length=1,
           max_gram_length=3, max_skip_count=1, **POOL)
    _check(tmp_path, np.array([4, 1, 4, 1, 4], np.int32), mode="TFIDF", min_gram_length=2,
           max_gram_length=2, max_skip_count=1, pool_int64s=[4, 1, 1, 4, 2**40, 4],
           ngram_counts=[0, 0], ngram_indexes=[1, 0, 2], weights=[2.0, 3.0, 5.0])
    _check(tmp_path, np.array([7], np.int64), mode="IDF", min_gram_length=1, max_gram_length=2,
           max_skip_count=0, **POOL)


def test_weights_follow_their_ngram(tmp_path):
    """Two unigrams at swapped outputs: each output gets its n-gram's weight (onnxruntime's
    [100, 20]; the ONNX reference gives [10, 200]). Output indexes with a gap (output 2 is
    no n-gram's) are 0."""
    got = _check(tmp_path, np.array([2, 2, 3], np.int64), mode="TFIDF", min_gram_length=1,
                 max_gram_length=1, max_skip_count=0, ngram_counts=[0], ngram_indexes=[1, 0],
                 pool_int64s=[2, 3], weights=[10.0, 100.0])
    np.testing.assert_array_equal(got, [100.0, 20.0])
    _check(tmp_path, _tokens((2, 11), "int64", seed=9), mode="TF", min_gram_length=1,
           max_gram_length=2, max_skip_count=1, ngram_counts=[0, 2], ngram_indexes=[4, 0, 2],
           pool_int64s=[2, 5, 3, 5])


def _compile(tmp_path, x, **attrs):
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="tfidf", **attrs)
    feeds = {"x": x}
    model = make_model([node], feeds, [], opset=9)
    model.graph.output.append(helper.make_tensor_value_info("y", 1, list("nc")[:x.ndim]))
    return compile_and_run(model, feeds, tmp_path)


@pytest.mark.parametrize("change,error", [
    ({"mode": "BM25"}, UnsupportedError),
    ({"weights": [1.0, 2.0]}, ModelError),                  # fewer than the 11 n-grams
    ({"ngram_indexes": [0] * 11, "weights": [1.0] * 11}, ModelError),   # weights compete
    ({"ngram_counts": [0, 13, 5]}, ModelError),             # not non-decreasing
    ({"ngram_indexes": [0, 1, 2]}, ModelError),             # fewer than the pool's n-grams
    ({"max_gram_length": 0}, UnsupportedError),
    ({"pool_int64s": [2, 3, 5, 3, 2, 3, 3]}, ModelError),   # unigram 3 twice
])
def test_refusals(tmp_path, change, error):
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=3, max_skip_count=0, **POOL)
    attrs.update(change)
    with pytest.raises(error, match="tfidf|weights|ngram"):
        _compile(tmp_path, _tokens((9,), "int64", seed=1), **attrs)
    with pytest.raises(ModelError, match="unsupported type: tensor.float"):
        _compile(tmp_path, _tokens((9,), "int64", seed=1).astype(np.float32), mode="TF",
                 min_gram_length=1, max_gram_length=3, max_skip_count=0, **POOL)
