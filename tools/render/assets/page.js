(function(){
'use strict';
function fmtB(b){var u=['B','KiB','MiB','GiB','TiB','PiB','EiB'],i=0;while(b>=1024&&i<u.length-1){b/=1024;i++;}return i?b.toFixed(2)+' '+u[i]:b+' B';}
function fmtT(ns){if(ns<1e3)return ns+' ns';if(ns<1e6)return (ns/1e3).toFixed(2)+' \u00b5s';if(ns<1e9)return (ns/1e6).toFixed(2)+' ms';return (ns/1e9).toFixed(2)+' s';}
function key(td){var v=td.getAttribute('data-v');return v===null?null:parseFloat(v);}
var tables=document.querySelectorAll('table.sortable');
Array.prototype.forEach.call(tables,function(t){
 if(!t.tHead||!t.tBodies.length)return;
 var ths=t.tHead.rows[0].cells;
 Array.prototype.forEach.call(ths,function(th,col){
  th.title='Sort';
  th.addEventListener('click',function(){
   var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
   var dir=th.getAttribute('data-dir')==='desc'?'asc':'desc';
   Array.prototype.forEach.call(ths,function(h){h.removeAttribute('data-dir');});
   th.setAttribute('data-dir',dir);
   rows.sort(function(a,b){var x=a.cells[col],y=b.cells[col];if(!x||!y)return 0;
    var nx=key(x),ny=key(y),r=(nx!==null&&ny!==null)?nx-ny:x.textContent.localeCompare(y.textContent);
    return dir==='asc'?r:-r;});
   rows.forEach(function(r){body.appendChild(r);});
  });
 });
});
var tip=document.createElement('div');tip.className='tip';document.body.appendChild(tip);
var charts=document.querySelectorAll('svg.chart');
Array.prototype.forEach.call(charts,function(svg){
 var el=document.getElementById(svg.id+'-data'),hit=svg.querySelector('.hit'),hair=svg.querySelector('.hair');
 if(!el||!hit||!hair)return;
 var d=JSON.parse(el.textContent);if(!d.t.length)return;
 hit.style.pointerEvents='all';
 hit.addEventListener('mousemove',function(ev){
  var m=svg.getScreenCTM();if(!m)return;
  var pt=svg.createSVGPoint();pt.x=ev.clientX;pt.y=ev.clientY;pt=pt.matrixTransform(m.inverse());
  var t=(pt.x-d.x0)/d.pw*d.tmax,lo=0,hi=d.t.length-1;
  while(lo<hi){var k=(lo+hi+1)>>1;if(d.start[k]<=t)lo=k;else hi=k-1;}
  var x=d.x0+d.pw*d.start[lo]/d.tmax;hair.setAttribute('x1',x);hair.setAttribute('x2',x);hair.style.display='';
  var to=lo+1<d.start.length?d.start[lo+1]:d.tmax;
  var h='<b>'+fmtT(d.start[lo])+' \u2013 '+fmtT(to)+'</b><table>',tot=0;
  for(var c=d.cats.length-1;c>=0;c--){var v=d.v[c][lo];tot+=v;h+='<tr><td><i class="sw" style="background:'+d.colors[c]+'"></i>'+d.cats[c]+'</td><td>'+fmtB(v)+'</td></tr>';}
  h+='<tr class="tot"><td>total</td><td>'+fmtB(tot)+'</td></tr><tr><td>max in sample</td><td>'+fmtB(d.max[lo])+'</td></tr></table>';
  tip.innerHTML=h;tip.style.display='block';
  var left=ev.pageX+14;if(ev.clientX+tip.offsetWidth+24>window.innerWidth)left=ev.pageX-tip.offsetWidth-14;
  tip.style.left=left+'px';tip.style.top=(ev.pageY+14)+'px';
 });
 hit.addEventListener('mouseleave',function(){tip.style.display='none';hair.style.display='none';});
});
document.body.setAttribute('data-ready','1');
})();
