"""No silent miss: every way real code reached a legacy name, end to end.

Each case is a whole file before and after `python -m mplso.upgrade`, with
the report's exact lines: a use is rewritten, or gets a `WARNING` line at
its `file:line` that says what to do. The forms: star imports, private
modules, Keras 2's own package, `getattr` with a literal name, a name bound
two ways, helpers the tool cannot follow, TF 1.x's own `tf.train
.experimental`, comments inside what is rewritten, and the switches that do
nothing (or half) on TF 2.21.
"""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized

from mplso._src.upgrade import rewrite
from mplso_test.helpers import upgrade_cases

# The reason each line that sets one of these switches gets.
_NGC_ENVIRONMENT_WHY = (
    "    `TF_ENABLE_AUTO_MIXED_PRECISION` turned on the float16 graph rewrite "
    "and loss scaling in NVIDIA's NGC TensorFlow containers; stock TF 2.21 "
    "ignores it, so the program trains in float32: for the same effect, "
    "`opt = mplso.enable_mixed_precision_graph_rewrite(opt)`, or a Keras "
    "`mixed_float16` policy with a LossScaleOptimizer")
_GRAPPLER_WHY = (
    "    Grappler's `auto_mixed_precision` rewrite casts to float16 on TF "
    "2.21 with no loss scaling, so small gradients underflow to zero: wrap "
    "the optimizer instead, `opt = "
    "mplso.enable_mixed_precision_graph_rewrite(opt)` (turns the rewrite on "
    "and scales the loss), or use a Keras `mixed_float16` policy with a "
    "LossScaleOptimizer")

# The reason of `install()` for a policy set in a file without a `compile`
# (`policies`), after `    line N: `, and its end.
_ELSEWHERE_WHY = rewrite._ELSEWHERE_WHY
_INSTALLS = (". `mplso.compat.install()` keeps compile's wrapper mplso's, as "
             "the runner did")


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  before: str
  after: str
  report: tuple[str, ...]


CASES = (
    Case(
        "star_of_a_namespace_tf_lacks",
        """\
from tensorflow.keras.mixed_precision.experimental import *  # TF 2.3
import tensorflow as tf
from models import build

set_policy(Policy("mixed_float16"))
opt = LossScaleOptimizer(tf.keras.optimizers.SGD(), "dynamic")
model = build()
layer_policy = get_layer_policy(model.layers[0])
""",
        """\
from mplso.keras import LossScaleOptimizer
from mplso.compat import Policy, set_policy  # TF 2.3
import mplso.compat
mplso.compat.install()
import tensorflow as tf
from models import build

set_policy(Policy("mixed_float16"))
opt = LossScaleOptimizer(tf.keras.optimizers.SGD(), "dynamic")
model = build()
layer_policy = get_layer_policy(model.layers[0])
""",
        (
        "train.py: INFO: Added 'import mplso.compat'",
        "train.py:1: INFO: Changed 'from tensorflow.keras.mixed_precision"
        ".experimental import *' to 'from mplso.keras import "
        "LossScaleOptimizer; from mplso.compat import Policy, set_policy'",
        '    the file reads `LossScaleOptimizer`, `Policy`, `set_policy` '
        'from `tensorflow.keras.mixed_precision.experimental` '
        'unqualified: imported from mplso by name; TF 2.21 lacks the '
        'namespace, so its star import goes',
        # `build()` compiles in `models`: the policy set here reaches it.
        "train.py:5: INFO: Added 'mplso.compat.install()'",
        f"    line 5: {_ELSEWHERE_WHY}{_INSTALLS}",
        "train.py:8: WARNING: Kept 'get_layer_policy'",
        '    nothing in the file binds this name; it may have come from '
        '`from tensorflow.keras.mixed_precision.experimental import *`, '
        'which TF 2.21 lacks and the upgrade removed: import it by name '
        'from where it lives today',
        )),
    Case(
        "star_of_contrib",
        """\
from tensorflow.contrib.mixed_precision import *

manager = ExponentialUpdateLossScaleManager(2**15, 1000)
""",
        """\
from mplso.contrib import *

manager = ExponentialUpdateLossScaleManager(2**15, 1000)
""",
        (
        "train.py:1: INFO: Changed 'from tensorflow.contrib.mixed_precisi"
        "on import *' to 'from mplso.contrib import *'",
        '    mplso.contrib holds every name of '
        '`tensorflow.contrib.mixed_precision`, under the same names',
        )),
    Case(
        "star_of_a_namespace_tf_has",
        """\
import tensorflow.compat.v1 as tf
from tensorflow.compat.v1.train.experimental import *

opt = MixedPrecisionLossScaleOptimizer(tf.train.AdamOptimizer(), 128)
other = PythonState
""",
        """\
import tensorflow.compat.v1 as tf
from tensorflow.compat.v1.train.experimental import *
from mplso import MixedPrecisionLossScaleOptimizer

opt = MixedPrecisionLossScaleOptimizer(tf.train.AdamOptimizer(), 128)
other = PythonState
""",
        (
        "train.py:2: INFO: Changed 'from tensorflow.compat.v1.train.exper"
        "imental import *' to 'from tensorflow.compat.v1.train.experiment"
        "al import *; from mplso import MixedPrecisionLossScaleOptimizer'",
        '    the file reads `MixedPrecisionLossScaleOptimizer` from '
        '`tensorflow.compat.v1.train.experimental` unqualified: imported '
        'from mplso by name after it',
        )),
    Case(
        "star_reexport",
        """\
# Our mixed-precision names, in one place.
from tensorflow.keras.mixed_precision.experimental import *
""",
        """\
# Our mixed-precision names, in one place.
from mplso.keras import LossScaleOptimizer
from mplso.compat import Policy, global_policy, set_policy
""",
        (
        "train.py:2: INFO: Changed 'from tensorflow.keras.mixed_precision"
        ".experimental import *' to 'from mplso.keras import "
        'LossScaleOptimizer; from mplso.compat import Policy, '
        "global_policy, set_policy'",
        '    the file reads none of the names of '
        '`tensorflow.keras.mixed_precision.experimental` unqualified, so '
        'it re-exports them: each is imported from mplso by name; TF '
        '2.21 lacks the namespace, so its star import goes',
        )),
    Case(
        "star_of_another_module",
        """\
from common import *

opt = LossScaleOptimizer(sgd, "dynamic")
""",
        """\
from common import *

opt = LossScaleOptimizer(sgd, "dynamic")
""",
        (
        "train.py:3: WARNING: Kept 'LossScaleOptimizer'",
        '    nothing in the file binds `LossScaleOptimizer`, a legacy '
        'loss-scale name (a star import of another module may give it): '
        "if it is TensorFlow's, import mplso's by name (`python -m "
        'mplso.compat --list`)',
        )),
    Case(
        "private_modules",
        """\
import tensorflow.compat.v1 as tf
from tensorflow.python.training.experimental import loss_scale as ls_lib
from tensorflow.python.training.experimental.loss_scale_optimizer import (
    MixedPrecisionLossScaleOptimizer)
from tensorflow.python.training.experimental.mixed_precision import (
    enable_mixed_precision_graph_rewrite_v1 as enable_v1)

scale = ls_lib.DynamicLossScale(initial_loss_scale=2**15)
same = ls_lib.get(scale)
opt = MixedPrecisionLossScaleOptimizer(tf.train.AdamOptimizer(), scale)
other = enable_v1(tf.train.AdamOptimizer())
""",
        """\
import tensorflow.compat.v1 as tf
from tensorflow.python.training.experimental import loss_scale as ls_lib
from mplso import MixedPrecisionLossScaleOptimizer
from mplso import enable_mixed_precision_graph_rewrite as enable_v1
import mplso

scale = mplso.DynamicLossScale(initial_loss_scale=2**15)
same = ls_lib.get(scale)
opt = MixedPrecisionLossScaleOptimizer(tf.train.AdamOptimizer(), scale)
other = enable_v1(tf.train.AdamOptimizer())
""",
        (
        "train.py: INFO: Added 'import mplso'",
        "train.py:3: INFO: Renamed 'from tensorflow.python.training.exper"
        'imental.loss_scale_optimizer import (\\n    '
        "MixedPrecisionLossScaleOptimizer)' to 'from mplso import "
        "MixedPrecisionLossScaleOptimizer'",
        "train.py:5: INFO: Renamed 'from tensorflow.python.training.exper"
        'imental.mixed_precision import (\\n    '
        "enable_mixed_precision_graph_rewrite_v1 as enable_v1)' to 'from "
        "mplso import enable_mixed_precision_graph_rewrite as enable_v1'",
        "train.py:8: INFO: Renamed 'ls_lib.DynamicLossScale' to "
        "'mplso.DynamicLossScale'",
        "train.py:9: WARNING: Kept 'ls_lib.get'",
        '    kept: `tf.python.training.experimental.loss_scale.get` is '
        'private, and TF never exported it; `mplso.loss_scale.get` does '
        'the same: use that',
        )),
    Case(
        "private_keras_modules",
        """\
import tensorflow as tf
from tensorflow.python.keras.mixed_precision.experimental import (
    loss_scale_optimizer as lso_lib)
from tensorflow.python.keras.mixed_precision import policy as policy_lib
import tensorflow.python.keras.mixed_precision.experimental.policy

opt = lso_lib.LossScaleOptimizer(tf.keras.optimizers.SGD(), "dynamic")
tensorflow.python.keras.mixed_precision.experimental.policy.set_policy(
    "mixed_float16")
old = policy_lib.PolicyV1("mixed_float16", loss_scale=128)
new = policy_lib.Policy("mixed_float16")
""",
        """\
import mplso.compat
mplso.compat.install()
import tensorflow as tf
from tensorflow.python.keras.mixed_precision import policy as policy_lib
import tensorflow
import mplso.keras

opt = mplso.keras.LossScaleOptimizer(tf.keras.optimizers.SGD(), "dynamic")
mplso.compat.set_policy(
    "mixed_float16")
old = mplso.compat.Policy("mixed_float16", loss_scale=128)
new = policy_lib.Policy("mixed_float16")
""",
        (
        "train.py: INFO: Added 'import mplso.compat; import mplso.keras'",
        "train.py:2: INFO: Changed 'from tensorflow.python.keras.mixed_pr"
        'ecision.experimental import (\\n    loss_scale_optimizer as '
        "lso_lib)' to '(removed)'",
        '    `tensorflow.python.keras.mixed_precision.experimental.loss_s'
        'cale_optimizer` held legacy loss-scale names (TF 2.21 lacks '
        'it), and every use of it is rewritten',
        "train.py:5: INFO: Renamed 'import tensorflow.python.keras.mixed_"
        "precision.experimental.policy' to 'import tensorflow'",
        "train.py:7: INFO: Renamed 'lso_lib.LossScaleOptimizer' to "
        "'mplso.keras.LossScaleOptimizer'",
        "train.py:8: INFO: Renamed 'tensorflow.python.keras.mixed_precisi"
        "on.experimental.policy.set_policy' to 'mplso.compat.set_policy'",
        "train.py:8: INFO: Added 'mplso.compat.install()'",
        f"    line 8: {_ELSEWHERE_WHY}; the policy's loss scale, `128`, would "
        "be lost too: Keras's `compile` wraps only a `mixed_float16` model's "
        f"optimizer, with its own dynamic scale (2**15){_INSTALLS}",
        "train.py:10: INFO: Renamed 'policy_lib.PolicyV1' to "
        "'mplso.compat.Policy'",
        "train.py:11: WARNING: Kept 'policy_lib.Policy'",
        '    kept: `tf.python.keras.mixed_precision.policy.Policy` is '
        'private; its public name `tf.keras.mixed_precision.Policy` is '
        "TF 2.21's own and acts on the Keras `tf.keras` is (the private "
        "one acts on TF's frozen copy of Keras 2, or is gone): use that",
        )),
    Case(
        "keras_2_package",
        """\
import keras
from keras.mixed_precision import experimental as mixed_precision
from keras.mixed_precision.loss_scale_optimizer import LossScaleOptimizer

policy = mixed_precision.Policy("mixed_float16", loss_scale="dynamic")
opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD())
assert isinstance(opt, LossScaleOptimizer)
""",
        """\
import mplso.compat
mplso.compat.install()
import keras
from mplso.keras import LossScaleOptimizer

policy = mplso.compat.Policy("mixed_float16", loss_scale="dynamic")
opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD())
assert isinstance(opt, LossScaleOptimizer)
""",
        (
        "train.py: INFO: Added 'import mplso.compat'",
        "train.py:2: INFO: Changed 'from keras.mixed_precision import "
        "experimental as mixed_precision' to '(removed)'",
        '    `keras.mixed_precision.experimental` held legacy loss-scale '
        'names (TF 2.21 lacks it), and every use of it is rewritten',
        "train.py:3: INFO: Renamed 'from keras.mixed_precision.loss_scale"
        "_optimizer import LossScaleOptimizer' to 'from mplso.keras "
        "import LossScaleOptimizer'",
        "train.py:5: INFO: Renamed 'mixed_precision.Policy' to "
        "'mplso.compat.Policy'",
        "train.py:5: INFO: Added 'mplso.compat.install()'",
        f"    line 5: {_ELSEWHERE_WHY}{_INSTALLS}",
        )),
    Case(
        "getattr",
        """\
import tensorflow as tf

LossScale = getattr(tf.train.experimental, "LossScale")
LSO = getattr(tf.contrib.mixed_precision, "LossScaleOptimizer", None)
manager = getattr(getattr(tf, "contrib"),
                  "mixed_precision").FixedLossScaleManager(8)
get_layer_policy = getattr(tf.keras.mixed_precision.experimental,
                           "get_layer_policy")
name = getattr(tf.keras.optimizers, "SGD")
""",
        """\
import tensorflow as tf
import mplso.contrib

LossScale = mplso.LossScale
LSO = mplso.contrib.LossScaleOptimizer
manager = mplso.contrib.FixedLossScaleManager(8)
get_layer_policy = getattr(tf.keras.mixed_precision.experimental,
                           "get_layer_policy")
name = getattr(tf.keras.optimizers, "SGD")
""",
        (
        "train.py: INFO: Added 'import mplso.contrib'",
        "train.py:3: INFO: Renamed 'getattr(tf.train.experimental, "
        '"LossScale")\' to \'mplso.LossScale\'',
        "train.py:4: INFO: Renamed 'getattr(tf.contrib.mixed_precision, "
        '"LossScaleOptimizer", None)\' to \'mplso.contrib.LossScaleOptimize'
        "r'",
        'train.py:5: INFO: Renamed \'getattr(getattr(tf, "contrib"),\\n    '
        '              "mixed_precision").FixedLossScaleManager\' to '
        "'mplso.contrib.FixedLossScaleManager'",
        "train.py:7: WARNING: Kept 'getattr(tf.keras.mixed_precision.expe"
        'rimental,\\n                           "get_layer_policy")\'',
        '    kept: `tf.keras.mixed_precision.experimental.get_layer_polic'
        'y` is not one of the names mplso serves; TF 2.21 lacks it (so '
        'does `python -m mplso.compat`)',
        )),
    Case(
        "bound_two_ways",
        """\
try:
  import tensorflow.compat.v1 as tf
except ImportError:
  import tensorflow as tf

opt = tf.train.experimental.MixedPrecisionLossScaleOptimizer(sgd, 8)
scale = tf.mixed_precision.experimental.DynamicLossScale()
v1_only = tf.mixed_precision.MixedPrecisionLossScaleOptimizer(sgd, 8)
""",
        """\
import mplso
try:
  import tensorflow.compat.v1 as tf
except ImportError:
  import tensorflow as tf

opt = mplso.MixedPrecisionLossScaleOptimizer(sgd, 8)
scale = mplso.DynamicLossScale()
v1_only = tf.mixed_precision.MixedPrecisionLossScaleOptimizer(sgd, 8)
""",
        (
        "train.py: INFO: Added 'import mplso'",
        "train.py:6: INFO: Renamed 'tf.train.experimental.MixedPrecisionL"
        "ossScaleOptimizer' to 'mplso.MixedPrecisionLossScaleOptimizer'",
        "train.py:7: INFO: Renamed 'tf.mixed_precision.experimental.Dynam"
        "icLossScale' to 'mplso.DynamicLossScale'",
        "train.py:8: WARNING: Kept 'tf.mixed_precision.MixedPrecisionLoss"
        "ScaleOptimizer'",
        '    kept: `tf` is bound in more than one way, and they make '
        'this a different name: `mplso.MixedPrecisionLossScaleOptimizer` '
        'through the binding at line 2; `tf.mixed_precision.MixedPrecisio'
        'nLossScaleOptimizer`, which mplso does not serve, through the '
        'binding at line 4. Rewrite it by hand to the name of the '
        'binding that runs on TF 2.21',
        )),
    Case(
        "bound_to_a_shim_or_none",
        """\
try:
  import tensorflow as tf
except ImportError:
  tf = None
try:
  import tensorflow as tf2
except ImportError:
  import tf_shim as tf2

opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(sgd, 8)
scale = tf2.train.experimental.DynamicLossScale()
""",
        """\
import mplso.keras
try:
  import tensorflow as tf
except ImportError:
  tf = None
try:
  import tensorflow as tf2
except ImportError:
  import tf_shim as tf2

opt = mplso.keras.LossScaleOptimizer(sgd, 8)
scale = tf2.train.experimental.DynamicLossScale()
""",
        (
        "train.py: INFO: Added 'import mplso.keras'",
        "train.py:10: INFO: Renamed 'tf.keras.mixed_precision.experimenta"
        "l.LossScaleOptimizer' to 'mplso.keras.LossScaleOptimizer'",
        "train.py:11: WARNING: Kept 'tf2.train.experimental.DynamicLossSc"
        "ale'",
        '    kept: `tf2` is bound in more than one way, and they make '
        'this a different name: `mplso.DynamicLossScale` through the '
        'binding at line 6; `tf_shim.train.experimental.DynamicLossScale`'
        ", not TensorFlow's, through the binding at line 8. Rewrite it "
        'by hand to the name of the binding that runs on TF 2.21',
        )),
    Case(
        "imported_per_version",
        """\
import tensorflow as tf

if tf.__version__ < "2.4":
  from tensorflow.keras.mixed_precision.experimental import LossScaleOptimizer
else:
  from tensorflow.keras.mixed_precision import LossScaleOptimizer
opt = LossScaleOptimizer(tf.keras.optimizers.SGD())
""",
        """\
import tensorflow as tf

if tf.__version__ < "2.4":
  from mplso.keras import LossScaleOptimizer
else:
  from mplso.keras import LossScaleOptimizer
opt = LossScaleOptimizer(tf.keras.optimizers.SGD())
""",
        (
        "train.py:4: INFO: Renamed 'from tensorflow.keras.mixed_precision"
        ".experimental import LossScaleOptimizer' to 'from mplso.keras "
        "import LossScaleOptimizer'",
        "train.py:6: INFO: Renamed 'from tensorflow.keras.mixed_precision"
        " import LossScaleOptimizer' to 'from mplso.keras import "
        "LossScaleOptimizer'",
        )),
    Case(
        "helpers_the_tool_cannot_follow",
        """\
import keras
import tensorflow as tf
from myproject import compat

class Wrappers:
  LossScaleOptimizer = None

def build(opt, tf_module, flags):
  mp = compat.mixed_precision()
  opt = mp.LossScaleOptimizer(opt, mp.FixedLossScaleManager(128))
  scale = get_tf().mixed_precision.experimental.DynamicLossScale()
  opt = tf_module.train.experimental.disable_mixed_precision_graph_rewrite()
  if flags.mixed_precision:
    opt = get_tf().keras.mixed_precision.LossScaleOptimizer(opt)
  mine = Wrappers.LossScaleOptimizer
  k3 = keras.mixed_precision.LossScaleOptimizer(opt)
  return MixedPrecisionLossScaleOptimizer(opt, 8)
""",
        """\
import keras
import tensorflow as tf
from myproject import compat

class Wrappers:
  LossScaleOptimizer = None

def build(opt, tf_module, flags):
  mp = compat.mixed_precision()
  opt = mp.LossScaleOptimizer(opt, mp.FixedLossScaleManager(128))
  scale = get_tf().mixed_precision.experimental.DynamicLossScale()
  opt = tf_module.train.experimental.disable_mixed_precision_graph_rewrite()
  if flags.mixed_precision:
    opt = get_tf().keras.mixed_precision.LossScaleOptimizer(opt)
  mine = Wrappers.LossScaleOptimizer
  k3 = keras.mixed_precision.LossScaleOptimizer(opt)
  return MixedPrecisionLossScaleOptimizer(opt, 8)
""",
        (
        "train.py:10: WARNING: Kept 'mp.FixedLossScaleManager'",
        '    the upgrade cannot tell what `mp` is, and '
        '`FixedLossScaleManager`, read through it, is a legacy '
        "loss-scale name: if it is TensorFlow's (a helper that returns "
        '`tf`, `tf.compat.v1`, `tf.contrib.mixed_precision`...), change '
        "it by hand to mplso's name (`python -m mplso.compat --list`) or "
        "make the helper return mplso's module",
        "train.py:10: WARNING: Kept 'mp.LossScaleOptimizer'",
        '    the upgrade cannot tell what `mp` is, and '
        '`LossScaleOptimizer`, read through it, is a legacy loss-scale '
        "name: if it is TensorFlow's (a helper that returns `tf`, "
        '`tf.compat.v1`, `tf.contrib.mixed_precision`...), change it by '
        "hand to mplso's name (`python -m mplso.compat --list`) or make "
        "the helper return mplso's module",
        "train.py:11: WARNING: Kept 'get_tf().mixed_precision.experimenta"
        "l.DynamicLossScale'",
        '    the upgrade cannot tell what `get_tf().mixed_precision` is, '
        'and `DynamicLossScale`, read through it, is a legacy loss-scale '
        "name: if it is TensorFlow's (a helper that returns `tf`, "
        '`tf.compat.v1`, `tf.contrib.mixed_precision`...), change it by '
        "hand to mplso's name (`python -m mplso.compat --list`) or make "
        "the helper return mplso's module",
        "train.py:12: WARNING: Kept 'tf_module.train.experimental.disable"
        "_mixed_precision_graph_rewrite'",
        '    the upgrade cannot tell what `tf_module.train.experimental` '
        'is, and `disable_mixed_precision_graph_rewrite`, read through '
        "it, is a legacy loss-scale name: if it is TensorFlow's (a "
        'helper that returns `tf`, `tf.compat.v1`, '
        "`tf.contrib.mixed_precision`...), change it by hand to mplso's "
        'name (`python -m mplso.compat --list`) or make the helper '
        "return mplso's module",
        "train.py:17: WARNING: Kept 'MixedPrecisionLossScaleOptimizer'",
        '    nothing in the file binds `MixedPrecisionLossScaleOptimizer`'
        ', a legacy loss-scale name (a star import of another module may '
        "give it): if it is TensorFlow's, import mplso's by name "
        '(`python -m mplso.compat --list`)',
        )),
    Case(
        "tf1_namespace",
        """\
import tensorflow as tf

opt = tf.train.AdamOptimizer(1e-3)
opt = tf.train.experimental.MixedPrecisionLossScaleOptimizer(opt, "dynamic")
""",
        """\
import tensorflow as tf
import mplso

opt = tf.train.AdamOptimizer(1e-3)
opt = mplso.MixedPrecisionLossScaleOptimizer(opt, "dynamic")
""",
        (
        "train.py: INFO: Added 'import mplso'",
        "train.py:4: INFO: Renamed 'tf.train.experimental.MixedPrecisionL"
        "ossScaleOptimizer' to 'mplso.MixedPrecisionLossScaleOptimizer'",
        )),
    Case(
        "comments_inside",
        """\
import tensorflow as tf
from tensorflow.keras.mixed_precision.experimental import (  # TF 2.3
    LossScaleOptimizer,  # wraps the optimizer
    # The policy sets the dtypes.
    Policy,
)

opt = (tf.train.experimental.  # TF 1.14's name
       MixedPrecisionLossScaleOptimizer(sgd, 128))
scale = getattr(tf.train.experimental,  # looked up by name
                "DynamicLossScale")()
""",
        """\
import tensorflow as tf
# TF 2.3
from mplso.keras import LossScaleOptimizer  # wraps the optimizer
# The policy sets the dtypes.
from mplso.compat import Policy
import mplso

opt = (mplso.  # TF 1.14's name
       MixedPrecisionLossScaleOptimizer(sgd, 128))
scale = (mplso.  # looked up by name
                DynamicLossScale)()
""",
        (
        "train.py: INFO: Added 'import mplso'",
        "train.py:2: INFO: Renamed 'from tensorflow.keras.mixed_precision"
        '.experimental import (  # TF 2.3\\n    LossScaleOptimizer,  # '
        'wraps the optimizer\\n    # The policy sets the dtypes.\\n    '
        "Policy,\\n)' to 'from mplso.keras import LossScaleOptimizer; "
        "from mplso.compat import Policy'",
        'train.py:8: INFO: Renamed "tf.train.experimental.  # TF 1.14\'s '
        'name\\n       MixedPrecisionLossScaleOptimizer" to '
        "'mplso.MixedPrecisionLossScaleOptimizer'",
        "train.py:10: INFO: Renamed 'getattr(tf.train.experimental,  # "
        'looked up by name\\n                "DynamicLossScale")\' to '
        "'mplso.DynamicLossScale'",
        )),
    Case(
        "switches",
        """\
import os
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"
os.environ.setdefault("TF_ENABLE_AUTO_MIXED_PRECISION", "1")
os.putenv("TF_ENABLE_AUTO_MIXED_PRECISION", "1")
os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "0"
tf.config.optimizer.set_experimental_options({"auto_mixed_precision": 1})
tf.config.optimizer.set_experimental_options({"auto_mixed_precision": 0})
config = tf.compat.v1.ConfigProto()
rewrite_options = config.graph_options.rewrite_options
rewrite_options.auto_mixed_precision = rewriter_config_pb2.RewriterConfig.ON
off = rewriter_config_pb2.RewriterConfig(
    auto_mixed_precision=rewriter_config_pb2.RewriterConfig.OFF)
policy = tf.keras.mixed_precision.experimental.Policy("infer_float32_vars")
tf.keras.mixed_precision.experimental.set_policy("infer")
layer = tf.keras.layers.Dense(4, dtype="float16_with_float32_vars")
mode = "infer"
""",
        """\
import os
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2
import mplso.compat

os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"
os.environ.setdefault("TF_ENABLE_AUTO_MIXED_PRECISION", "1")
os.putenv("TF_ENABLE_AUTO_MIXED_PRECISION", "1")
os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "0"
tf.config.optimizer.set_experimental_options({"auto_mixed_precision": 1})
tf.config.optimizer.set_experimental_options({"auto_mixed_precision": 0})
config = tf.compat.v1.ConfigProto()
rewrite_options = config.graph_options.rewrite_options
rewrite_options.auto_mixed_precision = rewriter_config_pb2.RewriterConfig.ON
off = rewriter_config_pb2.RewriterConfig(
    auto_mixed_precision=rewriter_config_pb2.RewriterConfig.OFF)
policy = mplso.compat.Policy("infer_float32_vars")
mplso.compat.set_policy("infer")
layer = tf.keras.layers.Dense(4, dtype="float16_with_float32_vars")
mode = "infer"
""",
        (
        "train.py: INFO: Added 'import mplso.compat'",
        'train.py:5: WARNING: Kept \'os.environ["TF_ENABLE_AUTO_MIXED_PREC'
        'ISION"] = "1"\'',
        _NGC_ENVIRONMENT_WHY,
        'train.py:6: WARNING: Kept \'os.environ.setdefault("TF_ENABLE_AUTO'
        '_MIXED_PRECISION", "1")\'',
        _NGC_ENVIRONMENT_WHY,
        'train.py:7: WARNING: Kept \'os.putenv("TF_ENABLE_AUTO_MIXED_PRECI'
        'SION", "1")\'',
        _NGC_ENVIRONMENT_WHY,
        'train.py:9: WARNING: Kept \'"auto_mixed_precision": 1\'',
        _GRAPPLER_WHY,
        "train.py:13: WARNING: Kept 'rewrite_options.auto_mixed_precision"
        " = rewriter_config_pb2.RewriterConfig.ON'",
        _GRAPPLER_WHY,
        "train.py:16: INFO: Renamed 'tf.keras.mixed_precision.experimenta"
        "l.Policy' to 'mplso.compat.Policy'",
        'train.py:16: WARNING: Kept \'"infer_float32_vars"\'',
        "    TF 2.21 refuses the policy name 'infer_float32_vars' (a TF "
        "2.0-2.1 name, since removed): use 'mixed_float16' or "
        "'mixed_bfloat16' (TF's own advice)",
        "train.py:17: INFO: Renamed 'tf.keras.mixed_precision.experimenta"
        "l.set_policy' to 'mplso.compat.set_policy'",
        'train.py:17: WARNING: Kept \'"infer"\'',
        "    TF 2.21 refuses the policy name 'infer' (a TF 2.0-2.1 name, "
        "since removed): use a dtype name ('float32') or "
        "'mixed_float16': layers no longer infer their dtype from the "
        'first input',
        'train.py:18: WARNING: Kept \'"float16_with_float32_vars"\'',
        "    TF 2.21 refuses the policy name 'float16_with_float32_vars' "
        "(a TF 2.0-2.1 name, since removed): use 'mixed_float16'",
        )),
)


class ReachTest(parameterized.TestCase):

  @parameterized.named_parameters((case.name, case) for case in CASES)
  def test_file_and_report(self, case):
    # The report is never empty: no file here is "no legacy loss-scale
    # names", and a second run changes nothing.
    self.assertNotEmpty(case.report)
    once = upgrade_cases.assert_upgrade(case.before, case.after, case.report,
                                        reasons=True, path="train.py")
    twice = rewrite.upgrade_source(once.code)
    self.assertEqual(once.code, twice.code)
    self.assertFalse(twice.changed, twice.edits)


if __name__ == "__main__":
  absltest.main()
